// CheckpointState: what a rank hands to the checkpoint writer and what the reader fills.
//
// The writer never special-cases a slot: it walks `slots` (every sharded state slot: master,
// moments, EMA slots, compute copy excluded) and `buffers` (replicated, written by rank 0 only).
// Everything else the run needs to resume (optimizer hyperparameters, the slot registry with EMA
// hyperparameters and counters, step counters, RNG and data-loader position) travels in `meta`
// as JSON and is stored verbatim in the manifest.
//
// Memory: views only; the caller keeps the memory alive (host memory; device slots are staged
// to host by the caller first).
#ifndef SHARDEMA_CHECKPOINT_STATE_H_
#define SHARDEMA_CHECKPOINT_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/dtype.h"
#include "framework/tensor.h"
#include "fsdp/layout.h"

namespace shardema {

// A sharded slot: layout.local_numel() elements of `dtype` in host memory, laid out as
// StoreLayout describes (this rank's slices of every unit, concatenated). A slot over a subset
// of the parameters (`params` non-empty: the tracked names) holds only their elements instead,
// as the compact array of fsdp/param_subset.h (ParamSubset::numel() elements).
struct SlotView {
  std::string name;  // "params" (fp32 master), "exp_avg", "exp_avg_sq", "ema_0.999", ...
  DType dtype = DType::kF32;
  void* data = nullptr;
  std::vector<std::string> params;  // empty: every parameter
};

// A replicated buffer: identical on every rank.
struct BufferView {
  std::string name;  // e.g. "norm.running_mean" or "ema_0.999/norm.running_mean"
  Shape shape;
  DType dtype = DType::kF32;
  void* data = nullptr;
};

struct CheckpointState {
  int64_t step = 0;
  int rank = 0;
  StoreLayout layout;  // at the current world size
  std::vector<SlotView> slots;
  std::vector<BufferView> buffers;
  nlohmann::json meta = nlohmann::json::object();
};

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_STATE_H_
