// Test helpers for checkpoint tests: a small model layout with awkward sizes, and slot data that
// is a formula of (slot, unit, global element index), so the expected contents of any rank at
// any world size are computed independently of the code under test.
#ifndef SHARDEMA_CHECKPOINT_TEST_UTIL_H_
#define SHARDEMA_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/state.h"
#include "fsdp/layout.h"

namespace shardema {
namespace ckpt_test {

// Units with odd sizes, a scalar, a zero-size parameter and an empty unit.
std::vector<UnitSpec> TestModel();
// TestModel scaled: unit "big" with `big_numel` extra elements (for multi-chunk files).
std::vector<UnitSpec> TestModelWithBig(int64_t big_numel);
StoreLayout MakeLayout(const std::vector<UnitSpec>& model, int world);

struct SlotSpec {
  std::string name;
  DType dtype;
};
std::vector<SlotSpec> DefaultSlots();  // params f32, exp_avg f32, ema_0.999 f32, ema_bf16 bf16

// Raw bits of element `elem` of unit `unit` of slot `salt` at `step`; never all-zero bits for
// real elements, so padding (zero) is distinguishable.
uint32_t ElementBits(uint32_t salt, size_t unit, int64_t elem, int64_t step);
uint32_t SlotSalt(const std::string& slot_name);

// The bytes rank `rank` holds for a slot: the formula for real elements, zeros for padding.
std::vector<char> ExpectedSlotBytes(const StoreLayout& layout, int rank, const SlotSpec& slot,
                                    int64_t step);

// One rank's state with owned memory.
struct OwnedState {
  CheckpointState state;
  std::vector<std::vector<char>> slot_data;
  std::vector<std::vector<float>> buffer_data;
};
// States filled with the formula (buffers: "bn.running_mean" [5] and "ema_0.999/bn.running_mean"
// [5], values a formula of the step) and a meta with optimizer/ema sections.
std::vector<OwnedState> MakeStates(const StoreLayout& layout, const std::vector<SlotSpec>& slots,
                                   int64_t step, bool with_buffers = true);
// Views into `owned` (re-pointing after a copy/move).
void RebindViews(OwnedState& owned);
std::vector<CheckpointState> StatesOf(const std::vector<OwnedState>& owned);
// A destination with zeroed (actually 0xAB-filled, to catch unwritten bytes) memory.
OwnedState MakeDest(const StoreLayout& layout, int rank, const std::vector<SlotSpec>& slots,
                    bool with_buffers = true);
std::vector<float> ExpectedBuffer(const std::string& name, int64_t step);
nlohmann::json TestMeta(double ema_decay);
// Lists `slot` in meta's "ema" section (TestMeta's layout) as a constant EMA with `start_step`
// that never started: progress {num_updates 0, last_update_step -1, started_at -1}, as
// EmaSlots::ProgressJson writes a slot before its start. `storage` ("" for none) goes into its
// config (e.g. "bf16" for the bf16 slot).
void MarkEmaNotStarted(nlohmann::json& meta, const std::string& slot, int64_t start_step,
                       const std::string& storage = "");

// A fresh empty directory under $TEST_TMPDIR (or /tmp); removed by the caller or left for bazel.
std::string NewTempDir(const std::string& tag);

}  // namespace ckpt_test
}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_TEST_UTIL_H_
