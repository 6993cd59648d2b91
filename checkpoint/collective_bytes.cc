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
}  // namespace

StatusOr<std::vector<std::string>> AllGatherBytes(Communicator* comm, const std::string& mine) {
  if (WorldSizeOf(comm) == 1) return std::vector<std::string>{mine};
  RETURN_IF_ERROR(CheckHostComm(comm));
  const size_t world = size_t(comm->world_size());
  const LengthBytes my_len = PutU64(mine.size());
  std::vector<LengthBytes> lens(world);
  RETURN_IF_ERROR(comm->AllGather(my_len.b, lens.data(), sizeof(my_len.b), DType::kU8));
  uint64_t longest = 0;
  for (const LengthBytes& l : lens) longest = std::max(longest, GetU64(l));
  const size_t bytes = size_t(longest);
  std::string send(bytes, '\0'), recv(bytes * world, '\0');
  std::memcpy(&send[0], mine.data(), mine.size());
  RETURN_IF_ERROR(comm->AllGather(send.data(), &recv[0], bytes, DType::kU8));
  std::vector<std::string> out(world);
  for (size_t r = 0; r < world; ++r) out[r] = recv.substr(bytes * r, size_t(GetU64(lens[r])));
  return out;
}

StatusOr<std::string> BroadcastBytes(Communicator* comm, const std::string& value, int root) {
  if (WorldSizeOf(comm) == 1) return value;
  RETURN_IF_ERROR(CheckHostComm(comm));
  const bool is_root = comm->rank() == root;
  LengthBytes len = PutU64(is_root ? value.size() : 0);
  CollectiveOptions opts;
  opts.root = root;
  RETURN_IF_ERROR(comm->Broadcast(len.b, sizeof(len.b), DType::kU8, opts));
  std::string buf = is_root ? value : std::string(size_t(GetU64(len)), '\0');
  RETURN_IF_ERROR(comm->Broadcast(&buf[0], buf.size(), DType::kU8, opts));
  return buf;
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
