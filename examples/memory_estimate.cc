#include "examples/memory_estimate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "framework/checked_math.h"
#include "framework/dtype.h"

namespace shardema::examples {
namespace {

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

}  // namespace

std::string RankMemoryEstimate::ToString() const {
  std::ostringstream o;
  o << Bytes(total_bytes) << " per rank for " << params << " parameters (state "
    << Bytes(state_bytes) << ", gathered unit " << Bytes(unit_bytes) << ", activations "
    << Bytes(activation_bytes) << ", data " << Bytes(data_bytes) << ")";
  return o.str();
}

namespace {

// The model's units (elements each) and the f32 activation elements per row of a micro-batch
// (values only): the MLP's layer widths, or the GPT's per-token tensors of every block (ln_1,
// qkv, attention probabilities, attention output, c_proj, ln_2, c_fc, gelu and its tanh, mlp
// c_proj: 20 C + n_head T per token) plus the logits.
struct ModelShape {
  std::vector<int64_t> units;
  int64_t activations_per_row = 0;
};

StatusOr<ModelShape> ShapeOf(const TrainConfig& c) {
  ModelShape m;
  if (c.model == ModelKind::kGpt) {
    const std::string flag = "--n-embd / --n-layer / --block-size";
    const int64_t C = c.n_embd, T = c.block_size, V = 256;
    if (C <= 0 || T <= 0 || c.n_layer <= 0 || c.n_head <= 0)
      return InvalidArgument(flag, " must be > 0");
    ASSIGN_OR_RETURN(int64_t c2, MulAdd(C, C, 0, flag));
    ASSIGN_OR_RETURN(int64_t block, MulAdd(c2, 12, 13 * C, flag));
    m.units = {V * C, T * C, 2 * C};
    for (int64_t i = 0; i < c.n_layer; ++i) m.units.push_back(block);
    ASSIGN_OR_RETURN(int64_t per_token, MulAdd(c.n_head, T, 20 * C, flag));
    ASSIGN_OR_RETURN(per_token, MulAdd(per_token, c.n_layer, V, flag));
    ASSIGN_OR_RETURN(m.activations_per_row, MulAdd(per_token, T, 0, flag));
    return m;
  }
  const std::string flag = "--layers";
  if (c.layers.size() < 2) return InvalidArgument(flag, ": need at least two sizes");
  for (size_t i = 0; i + 1 < c.layers.size(); ++i) {
    if (c.layers[i] <= 0 || c.layers[i + 1] <= 0)
      return InvalidArgument(flag, ": sizes must be > 0");
    ASSIGN_OR_RETURN(int64_t unit, MulAdd(c.layers[i], c.layers[i + 1], c.layers[i + 1], flag));
    m.units.push_back(unit);
  }
  for (int64_t d : c.layers) {
    ASSIGN_OR_RETURN(m.activations_per_row, MulAdd(1, m.activations_per_row, d, flag));
  }
  return m;
}

}  // namespace

StatusOr<RankMemoryEstimate> EstimateRankMemory(const TrainConfig& c, int world_size) {
  if (world_size < 1) return InvalidArgument("world size ", world_size, " < 1");
  const std::string layers_flag = c.model == ModelKind::kGpt ? "--n-embd / --n-layer" : "--layers";
  ASSIGN_OR_RETURN(ModelShape shape, ShapeOf(c));
  RankMemoryEstimate e;
  int64_t local = 0, largest_unit = 0;
  const int64_t width_sum = shape.activations_per_row;
  for (int64_t unit : shape.units) {
    ASSIGN_OR_RETURN(e.params, MulAdd(1, e.params, unit, layers_flag));
    ASSIGN_OR_RETURN(local, MulAdd(1, local, (unit + world_size - 1) / world_size, layers_flag));
    largest_unit = std::max(largest_unit, unit);
  }
  const int64_t dtype = int64_t(DTypeSize(c.precision));
  const int64_t moments = c.optim == OptimizerKind::kAdamW ? 8 : 4;
  int64_t ema_bytes = 0;  // 4 per fp32 slot, 2 per bf16 storage (framework/ema_storage.h)
  for (const EmaConfig& ema : c.emas) ema_bytes += int64_t(DTypeSize(EmaStorageDType(ema.storage)));
  const int64_t per_elem = 4 + 4 + dtype + moments + ema_bytes;
  ASSIGN_OR_RETURN(e.state_bytes, MulAdd(local, per_elem, 0, layers_flag));
  ASSIGN_OR_RETURN(e.unit_bytes, MulAdd(largest_unit, 2 * dtype + 4, 0, layers_flag));
  const int64_t split = std::max<int64_t>(1, c.grad_accum) * world_size;
  // The GPT evaluates in training-sized micro-batches; the MLP in --eval-batch rows.
  const int64_t eval_rows = c.model == ModelKind::kGpt ? 0 : c.eval_batch;
  const int64_t rows = (std::max<int64_t>(1, c.batch) + split - 1) / split + eval_rows;
  ASSIGN_OR_RETURN(int64_t act, MulAdd(rows, width_sum, 0, "--batch / --eval-batch"));
  ASSIGN_OR_RETURN(e.activation_bytes, MulAdd(act, 8, 0, "--batch / --eval-batch"));
  if (c.data.empty() && c.model == ModelKind::kMlp) {
    ASSIGN_OR_RETURN(int64_t row_bytes,
                     MulAdd(c.layers.front() + c.layers.back(), 4, 0, layers_flag));
    ASSIGN_OR_RETURN(e.data_bytes, MulAdd(c.synthetic_rows, row_bytes, 0, "--synthetic-rows"));
  } else {
    struct stat st {};
    if (::stat(c.data.c_str(), &st) == 0) e.data_bytes = int64_t(st.st_size);
  }
  int64_t total = 0;
  for (int64_t part : {e.state_bytes, e.unit_bytes, e.activation_bytes, e.data_bytes}) {
    ASSIGN_OR_RETURN(total, MulAdd(1, total, part, "the memory estimate"));
  }
  e.total_bytes = total;
  return e;
}

Status CheckFitsInMemory(const RankMemoryEstimate& e, int ranks_on_node, int64_t available) {
  if (available < 0) return Status::Ok();
  const int64_t n = std::max(1, ranks_on_node);
  int64_t need = 0;
  if (!CheckedMul(e.total_bytes, n, &need) || need > available) {
    return ResourceExhausted("the run needs about ", e.ToString(), "; ", n,
                             " rank(s) on this machine need ", Bytes(e.total_bytes), " x ", n,
                             " but only ", Bytes(available),
                             " is available (MemAvailable): use fewer or smaller --layers, a",
                             " smaller --batch/--eval-batch/--synthetic-rows, or more ranks");
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

}  // namespace shardema::examples
