// The data of train_gpt: a token stream (bytes of a text file, or pre-tokenized), and which
// sequences each rank takes at each step.
//
// Tokens. --data FILE: a file whose name ends in ".safetensors" is read as pre-tokenized: its
// tensor `tokens` (U8, U16, I32 or I64, shape [N]) is the stream; any other file's raw bytes are
// the tokens (byte vocabulary). Every token must lie in [0, vocab). N must be at least T + 1 (one
// window of inputs plus its last target).
//
// Sequences. Optimizer step s (0-based) uses B sequences j = 0..B-1 of T tokens; sequence j
// starting at offset o has inputs tokens[o : o+T] and targets tokens[o+1 : o+T+1]. Ranks and
// micro-batches split j exactly as train_mlp splits rows (examples/dataset.h MicroBatchSpan).
//   sequential  o = ((s*B + j) * T) mod (N - T)
//   shuffled    the non-overlapping windows o = k*T, k = 0..K-1, K = floor((N - 1) / T), visited
//               in a seeded random order per epoch: global sequence g = s*B + j lies in epoch
//               e = floor(g / K) at position p = g mod K, and o = T * perm_e[p], where perm_e is
//               the Fisher-Yates shuffle of 0..K-1 drawn from SeededRng(seed,
//               "data.shuffle.epoch.<e>") (framework/rng.h): for i = K-1 down to 1, swap entries
//               i and Next() mod (i+1).
// Both orders are pure functions of (seed, s, j): the same at every world size, and a resume on
// any world size continues them exactly.
// Evaluation uses the windows o = k*T, k = 0..K-1 of the eval stream (--eval-data, else the
// training stream), in order, split contiguously over ranks (EvalSpan).
//
// Errors: kNotFound (missing file or tensor), kInvalidArgument naming the file (wrong dtype or
// shape, a token outside the vocabulary with its index, too few tokens), kDataLoss (corrupt
// safetensors). Threading: values; a SequenceOrder caches one epoch's permutation (one thread).
#ifndef SHARDEMA_EXAMPLES_GPT_DATA_H_
#define SHARDEMA_EXAMPLES_GPT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "examples/dataset.h"
#include "framework/status.h"

namespace shardema::examples {

enum class DataOrder { kSequential, kShuffled };
const char* DataOrderName(DataOrder o);  // "sequential", "shuffled"
StatusOr<DataOrder> ParseDataOrder(const std::string& s);

struct TokenData {
  std::string source;           // the file
  std::vector<int32_t> tokens;  // [N]
  int64_t size() const { return int64_t(tokens.size()); }
};

// Loads --data / --eval-data (see above) for sequences of `seq_len` tokens.
StatusOr<TokenData> LoadTokens(const std::string& path, int64_t vocab, int64_t seq_len);

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
