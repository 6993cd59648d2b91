#include "checkpoint/checksum.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace shardema {

uint64_t Xxh3(const void* data, size_t n) { return SHARDEMA_ISA_DISPATCH(xxh3, Oneshot, data, n); }

std::string HashToHex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return std::string(buf, 16);
}

namespace {
int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ParseHex16(const char* p, uint64_t* out) {
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    int d = HexDigit(p[i]);
    if (d < 0) return false;
    v = (v << 4) | uint64_t(d);
  }
  *out = v;
  return true;
}
}  // namespace

StatusOr<uint64_t> HashFromHex(const std::string& hex, const std::string& what) {
  uint64_t v = 0;
  if (hex.size() != 16 || !ParseHex16(hex.data(), &v)) {
    return DataLoss(what, ": expected 16 hex digits, found '", hex.substr(0, 40), "'");
  }
  return v;
}

std::string EncodeHashList(const std::vector<uint64_t>& hashes) {
  std::string out;
  out.reserve(hashes.size() * 16);
  for (uint64_t h : hashes) out += HashToHex(h);
  return out;
}

StatusOr<std::vector<uint64_t>> DecodeHashList(const std::string& text, size_t expected_count,
                                               const std::string& what) {
  if (text.size() % 16 != 0 || text.size() / 16 != expected_count) {  // no overflow
    return DataLoss(what, ": expected ", expected_count, " digests (16 hex digits each), found ",
                    text.size(), " hex digits");
  }
  std::vector<uint64_t> out(expected_count);
  for (size_t i = 0; i < expected_count; ++i) {
    if (!ParseHex16(text.data() + 16 * i, &out[i])) {
      return DataLoss(what, ": digest ", i, " is not 16 hex digits: '", text.substr(16 * i, 16),
                      "'");
    }
  }
  return out;
}

uint64_t NumChunks(uint64_t file_bytes, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return 0;
  return file_bytes / chunk_bytes + (file_bytes % chunk_bytes != 0 ? 1 : 0);  // no overflow
}

uint64_t DigestOfChunks(const std::vector<uint64_t>& chunk_digests) {
  std::vector<unsigned char> bytes(chunk_digests.size() * 8);
  for (size_t i = 0; i < chunk_digests.size(); ++i) {
    for (int b = 0; b < 8; ++b)
      bytes[8 * i + size_t(b)] = static_cast<unsigned char>(chunk_digests[i] >> (8 * b));
  }
  return Xxh3(bytes.data(), bytes.size());
}

StreamingHash::StreamingHash() { Reset(); }
void StreamingHash::Reset() { SHARDEMA_ISA_DISPATCH(xxh3, Reset, &state_); }
void StreamingHash::Update(const void* data, size_t n) {
  SHARDEMA_ISA_DISPATCH(xxh3, Update, &state_, data, n);
}
void StreamingHash::CopyAndUpdate(const void* src, void* dst, size_t n) {
  SHARDEMA_ISA_DISPATCH(xxh3, CopyAndUpdate, &state_, src, dst, n);
}
uint64_t StreamingHash::Digest() const { return SHARDEMA_ISA_DISPATCH(xxh3, Digest, &state_); }

ChunkedHash::ChunkedHash(uint64_t chunk_bytes) : chunk_bytes_(std::max<uint64_t>(chunk_bytes, 1)) {}

void ChunkedHash::Update(const void* data, size_t n) { Feed(data, nullptr, n); }
void ChunkedHash::CopyAndUpdate(const void* src, void* dst, size_t n) { Feed(src, dst, n); }

void ChunkedHash::Feed(const void* src, void* dst, size_t n) {
  const char* p = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  bytes_ += n;
  while (n > 0) {
    size_t take = size_t(std::min<uint64_t>(n, chunk_bytes_ - in_chunk_));
    if (out != nullptr) {
      chunk_.CopyAndUpdate(p, out, take);
      out += take;
    } else {
      chunk_.Update(p, take);
    }
    in_chunk_ += take;
    p += take;
    n -= take;
    if (in_chunk_ == chunk_bytes_) {
      chunks_.push_back(chunk_.Digest());
      chunk_.Reset();
      in_chunk_ = 0;
    }
  }
}

void ChunkedHash::Finish() {
  if (in_chunk_ > 0) {
    chunks_.push_back(chunk_.Digest());
    chunk_.Reset();
    in_chunk_ = 0;
  }
}

}  // namespace shardema
