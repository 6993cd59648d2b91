#include "train/memory_estimate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "framework/checked_math.h"
#include "framework/dtype.h"

namespace shardema {

// a * b + c, or an error naming `what` when it overflows int64 (inputs must be >= 0).
StatusOr<int64_t> MulAdd(int64_t a, int64_t b, int64_t c, const std::string& what) {
  int64_t p = 0, s = 0;
  if (!CheckedMul(a, b, &p) || !CheckedAdd(p, c, &s)) {
    return InvalidArgument(what, ": the size overflows a 64-bit integer (", a, " x ", b, " + ", c,
                           ")");
  }
  return s;
}

std::string Bytes(int64_t b) {
  char buf[32];
  const double v = double(b);
  if (v >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", v / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", v / (1024.0 * 1024));
  }
  return buf;
}

std::string RankMemoryEstimate::ToString() const {
  std::ostringstream o;
  o << Bytes(total_bytes) << " per rank for " << params << " parameters (state "
    << Bytes(state_bytes) << ", gathered unit " << Bytes(unit_bytes) << ", activations "
    << Bytes(activation_bytes) << ", data " << Bytes(data_bytes) << ")";
  return o.str();
}

StatusOr<RankMemoryEstimate> EstimateRankMemory(const TrainConfig& c, const ModelMemory& m,
                                                int world_size) {
  if (world_size < 1) return InvalidArgument("world size ", world_size, " < 1");
  const std::string& size_flag = m.size_flags;
  RankMemoryEstimate e;
  int64_t local = 0, largest_unit = 0;
  for (int64_t unit : m.unit_numels) {
    ASSIGN_OR_RETURN(e.params, MulAdd(1, e.params, unit, size_flag));
    ASSIGN_OR_RETURN(local, MulAdd(1, local, (unit + world_size - 1) / world_size, size_flag));
    largest_unit = std::max(largest_unit, unit);
  }
  const int64_t dtype = int64_t(DTypeSize(c.precision));
  const int64_t moments = c.optim == OptimizerKind::kAdamW ? 8 : 4;
  int64_t ema_bytes = 0;  // 4 per fp32 slot, 2 per bf16 storage (framework/ema_storage.h)
  for (const EmaConfig& ema : c.emas) ema_bytes += int64_t(DTypeSize(EmaStorageDType(ema.storage)));
  const int64_t per_elem = 4 + 4 + dtype + moments + ema_bytes;
  ASSIGN_OR_RETURN(e.state_bytes, MulAdd(local, per_elem, 0, size_flag));
  ASSIGN_OR_RETURN(e.unit_bytes, MulAdd(largest_unit, 2 * dtype + 4, 0, size_flag));
  const int64_t split = std::max<int64_t>(1, c.grad_accum) * world_size;
  const int64_t eval_rows = m.eval_in_train_batches ? 0 : c.eval_batch;
  const int64_t rows = (std::max<int64_t>(1, c.batch) + split - 1) / split + eval_rows;
  ASSIGN_OR_RETURN(int64_t act,
                   MulAdd(rows, m.activation_values_per_row, 0, "--batch / --eval-batch"));
  ASSIGN_OR_RETURN(e.activation_bytes, MulAdd(act, 8, 0, "--batch / --eval-batch"));
  e.data_bytes = m.data_bytes;
  e.size_flags = m.size_flags;
  int64_t total = 0;
  for (int64_t part : {e.state_bytes, e.unit_bytes, e.activation_bytes, e.data_bytes}) {
    ASSIGN_OR_RETURN(total, MulAdd(1, total, part, "the memory estimate"));
  }
  e.total_bytes = total;
  return e;
}

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
}

Status CheckFitsInMemory(const RankMemoryEstimate& e, int ranks_on_node, int64_t available) {
  if (available < 0) return Status::Ok();
  const int64_t n = std::max(1, ranks_on_node);
  int64_t need = 0;
  if (!CheckedMul(e.total_bytes, n, &need) || need > available) {
    return ResourceExhausted("the run needs about ", e.ToString(), "; ", n,
                             " rank(s) on this machine need ", Bytes(e.total_bytes), " x ", n,
                             " but only ", Bytes(available),
                             " is available (MemAvailable): a smaller model (", e.size_flags,
                             "), a smaller --batch/--eval-batch or data, or more ranks");
  }
  return Status::Ok();
}

int64_t AvailableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

}  // namespace shardema
