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

void PutU64(uint16_t* w, uint64_t v) {
  for (int i = 0; i < 4; ++i) w[i] = uint16_t(v >> (16 * i));
}
uint64_t GetU64(const uint16_t* w) {
  uint64_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint64_t(w[i]) << (16 * i);
  return v;
}
}  // namespace

StatusOr<std::vector<std::string>> AllGatherBytes(Communicator* comm, const std::string& mine) {
  if (WorldSizeOf(comm) == 1) return std::vector<std::string>{mine};
  RETURN_IF_ERROR(CheckHostComm(comm));
  const int world = comm->world_size();
  uint16_t len_words[4];
  PutU64(len_words, mine.size());
  std::vector<uint16_t> lens(4 * size_t(world));
  RETURN_IF_ERROR(comm->AllGather(len_words, lens.data(), 4, DType::kBF16));
  uint64_t longest = 0;
  for (int r = 0; r < world; ++r) longest = std::max(longest, GetU64(&lens[4 * size_t(r)]));
  const size_t words = size_t((longest + 1) / 2);
  std::vector<uint16_t> send(words, 0), recv(words * size_t(world));
  if (!mine.empty()) std::memcpy(send.data(), mine.data(), mine.size());
  RETURN_IF_ERROR(comm->AllGather(send.data(), recv.data(), words, DType::kBF16));
  std::vector<std::string> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const uint64_t n = GetU64(&lens[4 * size_t(r)]);
    out[size_t(r)].assign(reinterpret_cast<const char*>(recv.data() + words * size_t(r)), size_t(n));
  }
  return out;
}

StatusOr<std::string> BroadcastBytes(Communicator* comm, const std::string& value, int root) {
  if (WorldSizeOf(comm) == 1) return value;
  RETURN_IF_ERROR(CheckHostComm(comm));
  const bool is_root = comm->rank() == root;
  uint16_t len_words[4] = {0, 0, 0, 0};
  if (is_root) PutU64(len_words, value.size());
  CollectiveOptions opts;
  opts.root = root;
  RETURN_IF_ERROR(comm->Broadcast(len_words, 4, DType::kBF16, opts));
  const uint64_t n = GetU64(len_words);
  std::vector<uint16_t> buf(size_t((n + 1) / 2), 0);
  if (is_root && n > 0) std::memcpy(buf.data(), value.data(), size_t(n));
  RETURN_IF_ERROR(comm->Broadcast(buf.data(), buf.size(), DType::kBF16, opts));
  return std::string(reinterpret_cast<const char*>(buf.data()), size_t(n));
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
      return Status(s.code(), what + ": rank " + std::to_string(r) + " of " + std::to_string(world) +
                                  ": " + s.message());
    }
  }
  return Status::Ok();
}

}  // namespace shardema
