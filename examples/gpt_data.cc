#include "examples/gpt_data.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// llm.c token shards (see gpt_data.h).
constexpr int64_t kLlmcHeaderBytes = 256 * 4;
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;

// The little-endian int32 at p.
int32_t LoadLe32(const unsigned char* p) {
  return int32_t(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                 uint32_t(p[3]) << 24);
}

bool IsGlob(const std::string& path) { return path.find_first_of("*?") != std::string::npos; }

// The files matching a glob(3) pattern, sorted by name (byte-wise). Errors: kNotFound naming the
// pattern when nothing matches, kInvalidArgument for a match not ending in ".bin",
// kResourceExhausted / kInternal when glob fails.
StatusOr<std::vector<std::string>> GlobTokenFiles(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> names;
  if (rc == 0) names.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && names.empty())) {
    return NotFound("data pattern '", pattern, "' matches no file");
  }
  if (rc == GLOB_NOSPACE)
    return ResourceExhausted("data pattern '", pattern, "': glob out of memory");
  if (rc != 0) return Internal("data pattern '", pattern, "': glob failed (", rc, ")");
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (!EndsWith(n, ".bin")) {
      return InvalidArgument("data pattern '", pattern, "' matches '", n,
                             "', which is not a .bin token file");
    }
  }
  return names;
}

// The index of the shard holding shard-space index j (the last shard with begin <= j).
size_t ShardIndex(const std::vector<TokenShard>& shards, int64_t j) {
  auto it = std::upper_bound(shards.begin(), shards.end(), j,
                             [](int64_t v, const TokenShard& s) { return v < s.begin; });
  return size_t(it - shards.begin()) - 1;
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

int32_t TokenData::Token(int64_t i) const {
  if (i < int64_t(tokens.size())) return tokens[size_t(i)];
  const int64_t j = i - int64_t(tokens.size());
  const TokenShard& s = shards[ShardIndex(shards, j)];
  return s.Token(j - s.begin);
}

void CopyTokens(const TokenData& d, int64_t begin, int64_t n, int64_t* out) {
  const int64_t end = begin + n;
  const int64_t in_memory = int64_t(d.tokens.size());
  int64_t i = begin;
  for (; i < std::min(end, in_memory); ++i) *out++ = d.tokens[size_t(i)];
  if (i >= end) return;
  int64_t j = i - in_memory;  // index among the shards' tokens
  for (size_t k = ShardIndex(d.shards, j); i < end; ++k) {
    const TokenShard& s = d.shards[k];
    const int64_t take = std::min(end - i, s.begin + s.count - j);
    for (int64_t t = 0; t < take; ++t) *out++ = s.Token(j - s.begin + t);
    i += take;
    j += take;
  }
}

StatusOr<TokenShard> MapTokenFile(const std::string& path, int64_t vocab) {
  TokenShard s;
  s.path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "data file '" + path + "': open");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "data file '" + path + "': stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("data file '", path, "' is not a regular file");
  }
  const int64_t size = int64_t(st.st_size);
  if (size == 0) {  // mmap refuses length 0: an empty nanoGPT file, no tokens
    ::close(fd);
    return s;
  }
  void* addr = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (addr == MAP_FAILED) return ErrnoToStatus(map_errno, "data file '" + path + "': mmap");
  s.mapping = std::shared_ptr<const void>(
      addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size_t(size)); });
  const auto* bytes = static_cast<const unsigned char*>(addr);
  if (size >= kLlmcHeaderBytes && LoadLe32(bytes) == kLlmcMagic) {
    const int32_t version = LoadLe32(bytes + 4);
    if (version != kLlmcVersion) {
      return InvalidArgument("data file '", path, "': llm.c token shard version ", version,
                             ", expected ", kLlmcVersion);
    }
    const int64_t n = LoadLe32(bytes + 8);
    const int64_t after_header = size - kLlmcHeaderBytes;
    if (n < 0 || after_header != 2 * n) {
      return InvalidArgument("data file '", path, "': llm.c header says ", n, " tokens (", 2 * n,
                             " bytes after the ", kLlmcHeaderBytes,
                             "-byte header expected), the file has ", after_header, " (size ", size,
                             ")");
    }
    s.data = bytes + kLlmcHeaderBytes;
    s.count = n;
  } else {
    if (size % 2 != 0) {
      return InvalidArgument("data file '", path, "': size ", size,
                             " bytes is odd; a nanoGPT .bin file holds little-endian uint16 "
                             "tokens (2 bytes each)");
    }
    s.data = bytes;
    s.count = size / 2;
  }
  if (vocab <= 0xffff) {
    for (int64_t i = 0; i < s.count; ++i) {
      const int32_t v = s.Token(i);
      if (v >= vocab) {
        return InvalidArgument("data file '", path, "': tokens[", i, "] = ", v,
                               " is outside the vocabulary [0, ", vocab, ")");
      }
    }
  }
  return s;
}

StatusOr<TokenData> LoadTokens(const std::string& path, int64_t vocab, int64_t seq_len) {
  TokenData d;
  d.source = path;
  std::string what = "data file '" + path + "'";
  if (IsGlob(path) || EndsWith(path, ".bin")) {
    std::vector<std::string> files = {path};
    if (IsGlob(path)) {
      ASSIGN_OR_RETURN(files, GlobTokenFiles(path));
      what = "data pattern '" + path + "' (" + std::to_string(files.size()) + " files)";
    }
    int64_t begin = 0;
    for (const std::string& f : files) {
      ASSIGN_OR_RETURN(TokenShard s, MapTokenFile(f, vocab));
      s.begin = begin;
      begin += s.count;
      d.shards.push_back(std::move(s));
    }
  } else if (EndsWith(path, ".safetensors")) {
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
    return InvalidArgument(what, " has ", d.size(), " tokens; --block-size ", seq_len,
                           " needs at least ", seq_len + 1);
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
    CopyTokens(d, starts[r], seq_len + 1, out->tokens.data() + r * size_t(seq_len + 1));
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
