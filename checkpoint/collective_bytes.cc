#include "checkpoint/collective_bytes.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace shardema {

int RankOf(const Communicator* comm) { return comm ? comm->rank() : 0; }
int WorldSizeOf(const Communicator* comm) { return comm ? comm->world_size() : 1; }

namespace {
Status CheckHostComm(const Communicator* comm) {
  if (comm != nullptr && !comm->device().is_cpu()) {
    return InvalidArgument("checkpoint collectives need a host-memory communicator; got backend '",
                           comm->backend_name(), "' on ", comm->device().ToString());
  }
  return Status::Ok();
}

// A length as the 8 bytes that travel.
struct LengthBytes {
  uint8_t b[sizeof(uint64_t)];
};
LengthBytes PutU64(uint64_t v) {
  LengthBytes l;
  std::memcpy(l.b, &v, sizeof(v));
  return l;
}
uint64_t GetU64(const LengthBytes& l) {
  uint64_t v;
  std::memcpy(&v, l.b, sizeof(v));
  return v;
}
constexpr size_t kInlineBytes = kCollectiveBytesInline;
constexpr size_t kFrameBytes = sizeof(LengthBytes) + kInlineBytes;

// A frame: the 64-bit length, then the first kInlineBytes bytes of the string (zero padded). A
// fixed size, so every save's exchange has the same collective signature (checked once).
std::string Frame(const std::string& s) {
  std::string f(kFrameBytes, '\0');
  const LengthBytes len = PutU64(s.size());
  std::memcpy(&f[0], len.b, sizeof(len.b));
  std::memcpy(&f[sizeof(len.b)], s.data(), std::min(s.size(), kInlineBytes));
  return f;
}
uint64_t FrameLength(const char* frame) {
  LengthBytes l;
  std::memcpy(l.b, frame, sizeof(l.b));
  return GetU64(l);
}
}  // namespace

StatusOr<std::vector<std::string>> AllGatherBytes(Communicator* comm, const std::string& mine) {
  if (WorldSizeOf(comm) == 1) return std::vector<std::string>{mine};
  RETURN_IF_ERROR(CheckHostComm(comm));
  const size_t world = size_t(comm->world_size());
  const std::string frame = Frame(mine);
  std::string frames(kFrameBytes * world, '\0');
  RETURN_IF_ERROR(comm->AllGather(frame.data(), &frames[0], kFrameBytes, DType::kU8));
  std::vector<std::string> out(world);
  uint64_t longest_rest = 0;  // bytes beyond the inline part, longest over ranks
  for (size_t r = 0; r < world; ++r) {
    const char* f = frames.data() + kFrameBytes * r;
    const uint64_t len = FrameLength(f);
    out[r].assign(f + sizeof(LengthBytes), size_t(std::min<uint64_t>(len, kInlineBytes)));
    if (len > kInlineBytes) longest_rest = std::max(longest_rest, len - kInlineBytes);
  }
  if (longest_rest == 0) return out;
  const size_t rest = size_t(longest_rest);
  std::string send(rest, '\0'), recv(rest * world, '\0');
  if (mine.size() > kInlineBytes) {
    std::memcpy(&send[0], mine.data() + kInlineBytes, mine.size() - kInlineBytes);
  }
  RETURN_IF_ERROR(comm->AllGather(send.data(), &recv[0], rest, DType::kU8));
  for (size_t r = 0; r < world; ++r) {
    const uint64_t len = FrameLength(frames.data() + kFrameBytes * r);
    if (len > kInlineBytes) out[r].append(recv, rest * r, size_t(len - kInlineBytes));
  }
  return out;
}

StatusOr<std::string> BroadcastBytes(Communicator* comm, const std::string& value, int root) {
  if (WorldSizeOf(comm) == 1) return value;
  RETURN_IF_ERROR(CheckHostComm(comm));
  const bool is_root = comm->rank() == root;
  std::string frame = is_root ? Frame(value) : std::string(kFrameBytes, '\0');
  CollectiveOptions opts;
  opts.root = root;
  RETURN_IF_ERROR(comm->Broadcast(&frame[0], kFrameBytes, DType::kU8, opts));
  const uint64_t len = FrameLength(frame.data());
  if (len <= kInlineBytes) return frame.substr(sizeof(LengthBytes), size_t(len));
  std::string rest =
      is_root ? value.substr(kInlineBytes) : std::string(size_t(len - kInlineBytes), '\0');
  RETURN_IF_ERROR(comm->Broadcast(&rest[0], rest.size(), DType::kU8, opts));
  return frame.substr(sizeof(LengthBytes), kInlineBytes) + rest;
}

std::string EncodeStatus(const Status& s) {
  std::string out(1, char(uint8_t(s.code())));
  out += s.message();
  return out;
}

Status DecodeStatus(const std::string& bytes) {
  if (bytes.empty() || bytes[0] == 0) return Status::Ok();
  return Status(StatusCode(uint8_t(bytes[0])), bytes.substr(1));
}

Status AgreeOnStatus(Communicator* comm, const Status& local, const std::string& what) {
  const int world = WorldSizeOf(comm);
  ASSIGN_OR_RETURN(std::vector<std::string> all, AllGatherBytes(comm, EncodeStatus(local)));
  for (int r = 0; r < world; ++r) {
    Status s = DecodeStatus(all[size_t(r)]);
    if (!s.ok()) {
      return Status(s.code(), what + ": rank " + std::to_string(r) + " of " +
                                  std::to_string(world) + ": " + s.message());
    }
  }
  return Status::Ok();
}

}  // namespace shardema
