// CompareCheckpoints: what `ckpt diff` reports about two committed checkpoints: per slot the
// largest absolute and relative differences over the full unsharded slot, the differences of
// step, model, replicated buffers and meta.
//
// Values are compared unit by unit over unit elements [0, numel), read in pieces from both
// checkpoints through CheckpointReader::ReadUnitRange (verifying every checksum chunk touched),
// so the two checkpoints may have different world sizes (a checkpoint and its reshard compare
// identical) and memory stays bounded (a few pieces of piece_elements elements) whatever the
// model size. Padding is never compared.
//
// Per element, with a and b converted to f32: abs = |a - b|, rel = |a - b| / max(|a|, |b|)
// (0 when both are 0); a NaN against anything but the same NaN bits counts as an infinite
// difference. An element "differs" when its bits differ (slots of the same dtype; so -0 vs +0
// differs with abs 0) or its values differ (slots of different dtypes). The two checkpoints are
// identical when steps, models, slot names, dtypes and every element, buffers and meta are equal;
// the world size alone is not a difference. With slots_only: when models, slot names, dtypes and
// every slot element are equal (step and buffer differences are reported but do not count; the
// meta block and notes are not printed).
//
// Run-location fields are notes, not differences: a meta difference whose two values are strings
// and whose key names a location (ckpt_dir, data, eval_data, init, source, metrics, or any key
// ending in "dir", "path" or "file"), so two bit-identical runs written to different folders
// compare identical and the exit code of `ckpt diff` is a bit-exactness check. So is a meta
// "world_size" field whose two values are integers (the header compares world sizes).
//
// Errors: the reader's (kNotFound, kDataLoss naming the file and chunk). Single thread.
#ifndef SHARDEMA_TOOLS_CHECKPOINT_DIFF_H_
#define SHARDEMA_TOOLS_CHECKPOINT_DIFF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema::tools {

struct ValueDifference {
  int64_t elements = 0;   // elements compared
  int64_t different = 0;  // elements that differ (see above)
  double max_abs = 0.0;
  double max_rel = 0.0;
  std::string max_abs_at;  // "layers.0.weight[17]" (flattened index); "" when nothing differs
  float a_at_max = 0.f;
  float b_at_max = 0.f;
};

struct SlotComparison {
  std::string name;
  bool in_a = true;
  bool in_b = true;
  DType dtype_a = DType::kF32;
  DType dtype_b = DType::kF32;
  bool compared = false;  // values compared (present in both, same model)
  ValueDifference values;
  bool identical() const {
    return in_a && in_b && dtype_a == dtype_b && compared && values.different == 0;
  }
};

struct BufferComparison {
  std::string name;
  bool in_a = true;
  bool in_b = true;
  std::string mismatch;  // shape or dtype difference ("shape [5] vs [6]"); "" when they agree
  bool compared = false;
  ValueDifference values;
  bool identical() const {
    return in_a && in_b && mismatch.empty() && compared && values.different == 0;
  }
};

struct CheckpointComparison {
  std::string dir_a, dir_b;  // resolved checkpoint directories
  int64_t step_a = 0, step_b = 0;
  int world_a = 0, world_b = 0;
  std::vector<std::string> model_differences;  // LayoutDifferences (checkpoint = a, run = b)
  std::vector<SlotComparison> slots;           // a's slots in order, then those only in b
  std::vector<BufferComparison> buffers;
  std::vector<std::string> meta_differences;  // "path: <a> (a) vs <b> (b)"
  std::vector<std::string> notes;  // run-location and world-size fields that differ (same format)
  bool slots_only = false;         // CompareOptions::slots_only
  bool identical() const;
};

struct CompareOptions {
  int64_t piece_elements = int64_t(1) << 20;  // elements read per side per step (>= 1)
  // Called after every piece with the elements compared so far and the total to compare.
  std::function<void(uint64_t done, uint64_t total)> progress;
  bool slots_only = false;  // see above
};

// True when the meta key path (e.g. "meta.trainer.config.ckpt_dir") names a run location.
bool IsRunLocationKey(const std::string& path);

// `a`, `b`: checkpoint directories or roots (their `latest`).
StatusOr<CheckpointComparison> CompareCheckpoints(const std::string& a, const std::string& b,
                                                  const CompareOptions& options = {});

// The report `ckpt diff` prints: a header (directories, steps, world sizes), a table of slots
// (dtype, max abs, max rel, elements differing, where the max is), buffers, model and meta
// differences (at most max_meta_lines of them), and a last line "identical" or "different: ...".
std::string FormatComparison(const CheckpointComparison& c, size_t max_meta_lines = 40);

}  // namespace shardema::tools

#endif  // SHARDEMA_TOOLS_CHECKPOINT_DIFF_H_
