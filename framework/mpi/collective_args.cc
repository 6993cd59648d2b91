#include "framework/mpi/collective_args.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

namespace shardema {
namespace {

bool IsReduction(CollectiveKind k) {
  return k == CollectiveKind::kReduceScatter || k == CollectiveKind::kAllReduce;
}

// "[0x7f00, +40 bytes)"
std::string Range(const void* p, size_t bytes) {
  std::ostringstream os;
  os << "[" << p << ", +" << bytes << " bytes)";
  return os.str();
}

const char* KindNameOr(int64_t v) {
  return (v >= 0 && v <= static_cast<int64_t>(CollectiveKind::kBarrier))
             ? CollectiveName(static_cast<CollectiveKind>(v))
             : "unknown";
}
const char* DTypeNameOr(int64_t v) {
  return (v >= 0 && v <= static_cast<int64_t>(kLastDType)) ? DTypeName(static_cast<DType>(v))
                                                           : "unknown";
}
const char* OpNameOr(int64_t v) {
  return (v >= 0 && v <= static_cast<int64_t>(ReduceOp::kAvg))
             ? ReduceOpName(static_cast<ReduceOp>(v))
             : "unknown";
}

}  // namespace

const char* CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown";
}

size_t CollectiveCall::send_elems(int world_size) const {
  return kind == CollectiveKind::kReduceScatter ? count * size_t(world_size) : count;
}
size_t CollectiveCall::recv_elems(int world_size) const {
  return kind == CollectiveKind::kAllGather ? count * size_t(world_size) : count;
}

CollectiveCall MakeCollectiveCall(CollectiveKind kind, const void* send, void* recv, size_t count,
                                  DType dtype, const CollectiveOptions& opts) {
  CollectiveCall c;
  c.kind = kind;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.dtype = dtype;
  if (IsReduction(kind)) c.op = opts.op;
  if (kind == CollectiveKind::kBroadcast) c.root = opts.root;
  return c;
}

StatusOr<bool> CheckLocalArgs(const CollectiveCall& c, int rank, int world_size, size_t max_count) {
  const char* name = CollectiveName(c.kind);
  if (c.kind == CollectiveKind::kBarrier) return false;
  if (static_cast<int>(c.dtype) > static_cast<int>(kLastDType)) {
    return InvalidArgument(name, ": rank ", rank, ": unknown dtype ", static_cast<int>(c.dtype));
  }
  if (IsReduction(c.kind) && !IsFloatingDType(c.dtype)) {
    return InvalidArgument(name, ": rank ", rank, ": dtype ", DTypeName(c.dtype),
                           " cannot be reduced (reductions take f32, bf16 or f16; byte payloads "
                           "move with all_gather and broadcast)");
  }
  if (c.kind == CollectiveKind::kBroadcast && (c.root < 0 || c.root >= world_size)) {
    return InvalidArgument(name, ": rank ", rank, ": root ", c.root, " is not in [0, ", world_size,
                           ")");
  }
  if (c.count > max_count) {
    return InvalidArgument(name, ": rank ", rank, ": count ", c.count,
                           " exceeds this backend's limit of ", max_count,
                           " elements per call; split the buffer into several collectives");
  }
  const size_t esize = DTypeSize(c.dtype);
  const bool scaled =
      c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kReduceScatter;
  if (c.count > std::numeric_limits<size_t>::max() / esize / (scaled ? size_t(world_size) : 1)) {
    return InvalidArgument(name, ": rank ", rank, ": count ", c.count, " x ", world_size,
                           " ranks x ", esize, " bytes overflows the address space");
  }
  if (c.count == 0) return false;
  if (c.send == nullptr || c.recv == nullptr) {
    return InvalidArgument(name, ": rank ", rank, ": ",
                           c.kind == CollectiveKind::kBroadcast ? "buffer"
                           : c.send == nullptr                  ? "send buffer"
                                                                : "recv buffer",
                           " is null with count ", c.count);
  }
  if (c.kind == CollectiveKind::kBroadcast) return true;

  const size_t send_bytes = c.send_elems(world_size) * esize;
  const size_t recv_bytes = c.recv_elems(world_size) * esize;
  const auto s = reinterpret_cast<uintptr_t>(c.send);
  const auto r = reinterpret_cast<uintptr_t>(c.recv);
  const size_t slice = c.count * esize * size_t(rank);
  bool in_place = false;
  switch (c.kind) {
    case CollectiveKind::kAllGather: in_place = s == r + slice; break;
    case CollectiveKind::kReduceScatter: in_place = r == s + slice; break;
    case CollectiveKind::kAllReduce: in_place = s == r; break;
    default: break;
  }
  if (in_place) return true;
  const bool overlap = s < r + recv_bytes && r < s + send_bytes;
  if (overlap) {
    const char* where = c.kind == CollectiveKind::kAllGather       ? "send == recv + rank*count"
                        : c.kind == CollectiveKind::kReduceScatter ? "recv == send + rank*count"
                                                                   : "send == recv";
    return InvalidArgument(name, ": rank ", rank, ": send ", Range(c.send, send_bytes),
                           " overlaps recv ", Range(c.recv, recv_bytes),
                           " but is not in place (in place means ", where, ")");
  }
  return false;
}

CallSignature SignatureOf(const CollectiveCall& c, bool locally_invalid) {
  CallSignature s;
  s.kind = static_cast<int64_t>(c.kind);
  if (c.kind != CollectiveKind::kBarrier) {
    s.dtype = static_cast<int64_t>(c.dtype);
    // Counts above INT64_MAX are rejected locally; clamp so the packed value stays meaningful.
    s.count = c.count > uint64_t(std::numeric_limits<int64_t>::max())
                  ? std::numeric_limits<int64_t>::max()
                  : static_cast<int64_t>(c.count);
  }
  if (c.kind == CollectiveKind::kBroadcast) s.root = c.root;
  if (IsReduction(c.kind)) s.op = static_cast<int64_t>(c.op);
  s.invalid = locally_invalid ? 1 : 0;
  return s;
}

namespace {
std::array<int64_t, CallSignature::kFields> Fields(const CallSignature& s) {
  return {s.kind, s.invalid, s.dtype, s.count, s.root, s.op};
}
}  // namespace

PackedSignature PackForMaxReduce(const CallSignature& sig) {
  const auto f = Fields(sig);
  PackedSignature p{};
  for (int i = 0; i < CallSignature::kFields; ++i) {
    p[i] = f[i];
    // Fields are >= 0 (root is checked locally, but a negative root still negates safely).
    p[CallSignature::kFields + i] = f[i] == std::numeric_limits<int64_t>::min() ? f[i] : -f[i];
  }
  return p;
}

Status CompareSignatures(const CallSignature& mine, const PackedSignature& reduced, int rank) {
  const char* name = KindNameOr(mine.kind);
  const auto f = Fields(mine);
  constexpr int n = CallSignature::kFields;
  int64_t lo[n], hi[n];
  for (int i = 0; i < n; ++i) {
    hi[i] = reduced[i];
    lo[i] = -reduced[n + i];
  }
  // Field order in Fields(): kind, invalid, dtype, count, root, op.
  if (lo[0] != hi[0]) {
    return InvalidArgument(name, ": rank ", rank, " called ", name,
                           " but the ranks called collectives ranging ", KindNameOr(lo[0]), "..",
                           KindNameOr(hi[0]),
                           " (the sequence of collectives differs across ranks)");
  }
  if (hi[1] != 0) {
    return InvalidArgument(name, ": rank ", rank,
                           ": another rank passed invalid arguments (see its error); no rank "
                           "started the collective");
  }
  if (lo[2] != hi[2]) {
    return InvalidArgument(name, ": rank ", rank, " dtype ", DTypeNameOr(f[2]),
                           " but dtypes range ", DTypeNameOr(lo[2]), "..", DTypeNameOr(hi[2]),
                           " across ranks");
  }
  if (lo[3] != hi[3]) {
    return InvalidArgument(name, ": rank ", rank, " count ", f[3], " but counts range ", lo[3],
                           "..", hi[3], " across ranks");
  }
  if (lo[4] != hi[4]) {
    return InvalidArgument(name, ": rank ", rank, " root ", f[4], " but roots range ", lo[4], "..",
                           hi[4], " across ranks");
  }
  if (lo[5] != hi[5]) {
    return InvalidArgument(name, ": rank ", rank, " op ", OpNameOr(f[5]), " but ops range ",
                           OpNameOr(lo[5]), "..", OpNameOr(hi[5]), " across ranks");
  }
  return Status::Ok();
}

}  // namespace shardema
