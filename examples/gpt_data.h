// The data of train_gpt: a token stream (bytes of a text file, pre-tokenized safetensors, or
// memory-mapped .bin token files), and which sequences each rank takes at each step.
//
// Tokens. --data PATH, by its name: *.safetensors (its tensor `tokens`, U8/U16/I32/I64 [N], read
// into TokenData::tokens); *.bin, a token file memory-mapped (never copied) into
// TokenData::shards: an llm.c token shard (256 little-endian int32 header, magic 20240520,
// version 1, token count N, then N uint16 tokens) or else nanoGPT's raw uint16 train.bin /
// val.bin; a name containing '*' or '?', a glob(3) pattern of .bin files concatenated in sorted
// name order; anything else, the file's raw bytes (byte vocabulary). Every token must lie in
// [0, vocab), checked once at load; the stream needs at least T + 1 tokens.
//
// Sequences. Optimizer step s uses B sequences j of T tokens (inputs tokens[o : o+T], targets
// tokens[o+1 : o+T+1]), split over ranks and micro-batches as train/batch.h MicroBatchSpan says:
// sequential o = ((s*B + j) * T) mod (N - T); shuffled: the non-overlapping windows o = k*T in a
// seeded Fisher-Yates order per epoch (SeededRng(seed, "data.shuffle.epoch.<e>")). Both are pure
// functions of (seed, s, j): the same at every world size, continued exactly by a resume on any.
// Evaluation: the windows o = k*T of the eval stream in order, split contiguously over ranks
// (EvalSpan). File formats and both orders exactly: examples/GPT_DATA.md.
//
// Errors: kNotFound (missing file or tensor, a glob matching nothing), kInvalidArgument naming
// the file (wrong dtype or shape, a token outside the vocabulary with its index, too few tokens,
// a .bin file of odd size, an llm.c shard of another version or whose size disagrees with its
// header, a glob match that is not a .bin file), kDataLoss (corrupt safetensors), errno values
// of open / mmap. Threading: values (copies of a TokenData share its read-only mappings); a
// SequenceOrder caches one epoch's permutation (one thread).
#ifndef SHARDEMA_EXAMPLES_GPT_DATA_H_
#define SHARDEMA_EXAMPLES_GPT_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/dataset.h"
#include "framework/status.h"

namespace shardema::examples {

enum class DataOrder { kSequential, kShuffled };
const char* DataOrderName(DataOrder o);  // "sequential", "shuffled"
StatusOr<DataOrder> ParseDataOrder(const std::string& s);

// One memory-mapped .bin token file: `count` little-endian uint16 tokens at `data`.
struct TokenShard {
  std::string path;                     // the file
  std::shared_ptr<const void> mapping;  // the mmap (munmap when the last copy goes); null if empty
  const unsigned char* data = nullptr;  // the first token's bytes, inside `mapping`
  int64_t count = 0;                    // tokens in this file
  int64_t begin = 0;                    // stream index of its first token, minus tokens.size()
  // Token i of this file (0 <= i < count).
  int32_t Token(int64_t i) const {
    return int32_t(uint32_t(data[2 * i]) | uint32_t(data[2 * i + 1]) << 8);
  }
};

// The stream: `tokens` (safetensors, raw bytes) followed by the tokens of `shards` (.bin files);
// LoadTokens fills one of the two. shards[k].begin = the sum of the counts of shards[0..k-1].
struct TokenData {
  std::string source;              // the --data path (a glob pattern for several files)
  std::vector<int32_t> tokens;     // [N] in memory
  std::vector<TokenShard> shards;  // memory-mapped, in stream order
  int64_t size() const {
    return int64_t(tokens.size()) +
           (shards.empty() ? 0 : shards.back().begin + shards.back().count);
  }
  // Token i of the stream (0 <= i < size()): O(log shards).
  int32_t Token(int64_t i) const;
};

// Copies the stream's tokens [begin, begin + n) into out[0, n), across shard boundaries
// (0 <= begin, begin + n <= d.size()).
void CopyTokens(const TokenData& d, int64_t begin, int64_t n, int64_t* out);

// Loads --data / --eval-data (see above) for sequences of `seq_len` tokens.
StatusOr<TokenData> LoadTokens(const std::string& path, int64_t vocab, int64_t seq_len);

// Maps one .bin token file (llm.c shard or nanoGPT raw, see above) and checks every token against
// [0, vocab). The returned shard's begin is 0. Errors: those of LoadTokens for one .bin file.
StatusOr<TokenShard> MapTokenFile(const std::string& path, int64_t vocab);

// Offsets of the training sequences (see above).
class SequenceOrder {
 public:
  SequenceOrder(DataOrder order, uint64_t seed, int64_t num_tokens, int64_t seq_len, int64_t batch);
  // The offset o of sequence j of step `step`.
  int64_t Start(int64_t step, int64_t j);
  // Non-overlapping windows K (the shuffled epoch length and the eval window count).
  int64_t windows() const { return windows_; }

 private:
  DataOrder order_;
  uint64_t seed_;
  int64_t num_tokens_, seq_len_, batch_, windows_;
  int64_t epoch_ = -1;  // epoch of perm_
  std::vector<int64_t> perm_;
};

// Windows of a stream of `num_tokens` tokens: floor((num_tokens - 1) / seq_len).
int64_t NumWindows(int64_t num_tokens, int64_t seq_len);

// Copies the sequences at `starts` into out: rows = starts.size(), tokens [rows, T+1] (inputs
// are the first T of each row, targets the last T).
void FillSequences(const TokenData& d, const std::vector<int64_t>& starts, int64_t seq_len,
                   Batch* out);

// The sequences of `span` (j indices) of step `step` (training).
void FillStepSequences(const TokenData& d, SequenceOrder* order, int64_t step, RowSpan span,
                       int64_t seq_len, Batch* out);
// Eval windows [span.begin, span.end).
void FillWindowSequences(const TokenData& d, RowSpan span, int64_t seq_len, Batch* out);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_GPT_DATA_H_
