#include "examples/gpt_data.h"

#include <memory>
#include <utility>

#include "checkpoint/posix_file.h"
#include "checkpoint/safetensors.h"
#include "framework/rng.h"

namespace shardema::examples {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

template <typename T>
Status ReadAs(const SafetensorsFile& f, const SafetensorsTensor& t, int64_t n,
              std::vector<int32_t>* out, int64_t vocab) {
  std::vector<T> raw(static_cast<size_t>(n));
  RETURN_IF_ERROR(f.ReadRaw(t, 0, uint64_t(n) * sizeof(T), raw.data()));
  out->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = int64_t(raw[size_t(i)]);
    if (v < 0 || v >= vocab) {
      return InvalidArgument("data file '", f.path(), "': tokens[", i, "] = ", v,
                             " is outside the vocabulary [0, ", vocab, ")");
    }
    (*out)[size_t(i)] = int32_t(v);
  }
  return Status::Ok();
}

// (a * b) mod m without overflow (a, b >= 0, m > 0).
int64_t MulMod(int64_t a, int64_t b, int64_t m) {
  return int64_t((unsigned __int128)(a % m) * (unsigned __int128)(b % m) % (unsigned __int128)m);
}

}  // namespace

const char* DataOrderName(DataOrder o) {
  return o == DataOrder::kSequential ? "sequential" : "shuffled";
}

StatusOr<DataOrder> ParseDataOrder(const std::string& s) {
  if (s == "sequential") return DataOrder::kSequential;
  if (s == "shuffled") return DataOrder::kShuffled;
  return InvalidArgument("--data-order: '", s, "' is not sequential or shuffled");
}

StatusOr<TokenData> LoadTokens(const std::string& path, int64_t vocab, int64_t seq_len) {
  TokenData d;
  d.source = path;
  if (EndsWith(path, ".safetensors")) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
    const SafetensorsTensor* t = f->Find("tokens");
    if (t == nullptr) return NotFound("data file '", path, "' has no tensor 'tokens'");
    if (t->shape.size() != 1) {
      return InvalidArgument("data file '", path, "': tensor 'tokens' has shape ",
                             ShapeToString(t->shape), ", expected [N]");
    }
    const int64_t n = t->shape[0];
    if (t->dtype == "U8") {
      RETURN_IF_ERROR(ReadAs<uint8_t>(*f, *t, n, &d.tokens, vocab));
    } else if (t->dtype == "U16") {
      RETURN_IF_ERROR(ReadAs<uint16_t>(*f, *t, n, &d.tokens, vocab));
    } else if (t->dtype == "I32") {
      RETURN_IF_ERROR(ReadAs<int32_t>(*f, *t, n, &d.tokens, vocab));
    } else if (t->dtype == "I64") {
      RETURN_IF_ERROR(ReadAs<int64_t>(*f, *t, n, &d.tokens, vocab));
    } else {
      return InvalidArgument("data file '", path, "': tensor 'tokens' has dtype ", t->dtype,
                             ", expected U8, U16, I32 or I64");
    }
  } else {
    StatusOr<std::string> bytes = ReadFileToString(path);
    if (!bytes.ok()) return bytes.status().WithContext("data file '" + path + "'");
    d.tokens.resize(bytes->size());
    for (size_t i = 0; i < bytes->size(); ++i) {
      const int64_t v = int64_t(static_cast<unsigned char>((*bytes)[i]));
      if (v >= vocab) {
        return InvalidArgument("data file '", path, "': byte ", i, " = ", v,
                               " is outside the vocabulary [0, ", vocab, ")");
      }
      d.tokens[i] = int32_t(v);
    }
  }
  if (d.size() < seq_len + 1) {
    return InvalidArgument("data file '", path, "' has ", d.size(), " tokens; --block-size ",
                           seq_len, " needs at least ", seq_len + 1);
  }
  return d;
}

int64_t NumWindows(int64_t num_tokens, int64_t seq_len) { return (num_tokens - 1) / seq_len; }

SequenceOrder::SequenceOrder(DataOrder order, uint64_t seed, int64_t num_tokens, int64_t seq_len,
                             int64_t batch)
    : order_(order),
      seed_(seed),
      num_tokens_(num_tokens),
      seq_len_(seq_len),
      batch_(batch),
      windows_(NumWindows(num_tokens, seq_len)) {}

int64_t SequenceOrder::Start(int64_t step, int64_t j) {
  if (order_ == DataOrder::kSequential) {
    const int64_t m = num_tokens_ - seq_len_;
    const int64_t g = (MulMod(step, batch_, m) + j % m) % m;
    return MulMod(g, seq_len_, m);
  }
  // g = step * B + j as a 128-bit value, split into (epoch, position).
  const unsigned __int128 g =
      (unsigned __int128)step * (unsigned __int128)batch_ + (unsigned __int128)j;
  const int64_t epoch = int64_t(g / (unsigned __int128)windows_);
  const int64_t pos = int64_t(g % (unsigned __int128)windows_);
  if (epoch != epoch_) {
    perm_.resize(size_t(windows_));
    for (int64_t i = 0; i < windows_; ++i) perm_[size_t(i)] = i;
    SeededRng rng(seed_, "data.shuffle.epoch." + std::to_string(epoch));
    for (int64_t i = windows_ - 1; i >= 1; --i) {
      const int64_t k = int64_t(rng.Next() % uint64_t(i + 1));
      std::swap(perm_[size_t(i)], perm_[size_t(k)]);
    }
    epoch_ = epoch;
  }
  return perm_[size_t(pos)] * seq_len_;
}

void FillSequences(const TokenData& d, const std::vector<int64_t>& starts, int64_t seq_len,
                   Batch* out) {
  out->rows = int64_t(starts.size());
  out->x.clear();
  out->y.clear();
  out->labels.clear();
  out->tokens.resize(starts.size() * size_t(seq_len + 1));
  for (size_t r = 0; r < starts.size(); ++r) {
    for (int64_t t = 0; t <= seq_len; ++t) {
      out->tokens[r * size_t(seq_len + 1) + size_t(t)] = d.tokens[size_t(starts[r] + t)];
    }
  }
}

void FillStepSequences(const TokenData& d, SequenceOrder* order, int64_t step, RowSpan span,
                       int64_t seq_len, Batch* out) {
  std::vector<int64_t> starts;
  for (int64_t j = span.begin; j < span.end; ++j) starts.push_back(order->Start(step, j));
  FillSequences(d, starts, seq_len, out);
}

void FillWindowSequences(const TokenData& d, RowSpan span, int64_t seq_len, Batch* out) {
  std::vector<int64_t> starts;
  for (int64_t k = span.begin; k < span.end; ++k) starts.push_back(k * seq_len);
  FillSequences(d, starts, seq_len, out);
}

}  // namespace shardema::examples
