// UnitRunner: schedules the FSDP protocol of fsdp/store.h for a model written as per-unit forward
// and backward callbacks, so a model author writes only the math of each unit.
//
// Schedule. A model is a list of unit USES in forward order (UnitSchedule: use i runs store unit
// units[i]; a unit may be used more than once, e.g. a tied embedding; each use may ask for
// recomputation). ForwardBackward runs one micro-batch, collectively (all ranks run the same
// schedule): the forward gathers each use's unit (prefetching the next), calls forward(i) and
// releases it, keeping the last use's unit gathered; then the optional loss callback; then the
// backward in reverse: (re)gather, prefetch the previous use's unit, forward(i) again in mode
// kRecompute where asked, backward(i) into the unit's gradient buffer, release. After a unit's
// last backward use its gradient is reduce-scattered, exactly once per micro-batch, overlapping
// the next use's backward; a unit's second and later backward uses add to the gradient already
// there (UnitCall::accumulate). Under StoreOptions::unit_memory_limit_bytes a prefetch that does
// not fit becomes a gather at the use, a gradient buffer waits for the pending reduce-scatter.
// Step(K, ...) = ZeroGrad, K micro-batches, CheckGradsReady: each micro-batch's callbacks write
// the gradient of the MEAN loss over its local examples (the averaging contract of store.h);
// Forward(...) runs the forward alone (mode kEval). A split backward defers the prefetch past
// backward_input and the previous reduce-scatter's wait. The schedule in detail: fsdp/UNITS.md.
//
// Callbacks get the unit's views in its layout order (UnitLayout::params; ParamByName finds one
// by name). On MPI a collective moves only inside MPI calls, so the runner calls
// store->ProgressCollectives() before and after every callback (a callback may call
// UnitCall::progress too). On a CUDA store the callbacks queue their kernels on store->stream()
// and every store call is asynchronous in stream order.
//
// Errors: Create: kInvalidArgument for a null store, an empty schedule, a unit index out of range
// or a recompute list of another length than the schedule (messages name the use and unit).
// Run calls: the first error of a callback or of the store, with the use and unit named; after an
// error the store may hold gathered units and pending reduce-scatters (the runner does not clean
// up; the trainer treats errors as fatal). Threading: one thread (the store's).
#ifndef SHARDEMA_FSDP_UNIT_RUNNER_H_
#define SHARDEMA_FSDP_UNIT_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/phase_times.h"
#include "framework/status.h"
#include "framework/tensor.h"
#include "fsdp/layout.h"
#include "fsdp/store.h"

namespace shardema {

struct UnitSchedule {
  std::vector<size_t> units;    // store unit of each use, in forward order (repeats allowed)
  std::vector<bool> recompute;  // per use; empty = no recomputation anywhere
};

// Units 0..num_units-1, each used once, no recomputation (a plain stack of layers).
UnitSchedule SequentialSchedule(size_t num_units);

// Why a forward callback runs.
enum class ForwardMode {
  kTrain,          // training forward: keep what backward(i) needs
  kForwardNoSave,  // training forward of a recomputed use: only the output is needed now
  kRecompute,      // re-run inside the backward: same input, keep what backward(i) needs
  kEval,           // forward only (no backward follows)
};

// What a callback is told about the use it runs.
struct UnitCall {
  size_t use = 0;           // index into the schedule
  size_t unit = 0;          // store unit (schedule.units[use])
  int64_t micro_batch = 0;  // 0-based within the step (0 for ForwardBackward / Forward calls)
  ForwardMode mode = ForwardMode::kTrain;  // forward callbacks only
  // Backward only: true when a later use of the same unit (earlier in the backward) already
  // wrote its gradient into `grads`; the callback must then add to it instead of overwriting.
  bool accumulate = false;
  // Advances the collectives in flight (the prefetch gather, the previous unit's reduce-scatter)
  // without blocking: ShardedParameterStore::ProgressCollectives. A callback may call it between
  // pieces of its compute (e.g. between GEMMs); the runner itself calls it at every unit
  // boundary (before and after each callback). Never null inside a callback.
  std::function<void()> progress;
  // The store's layout (its units and their parameters, fsdp/layout.h), for ParamByName; never
  // null inside a callback (null in a UnitCall made by hand). Valid while the store lives.
  const StoreLayout* layout = nullptr;
};

// Parameter lookup by name inside a callback. `views` are a callback's `params`, or a backward's
// `grads` (both hold the unit's parameters in its layout order, layout->units()[unit].params), and
// `name` a parameter's full name as registered (e.g. "layers.0.weight"); returns that
// parameter's view (its shape, dtype and memory; a gradient view for `grads`). A linear scan of
// the unit's parameters, no allocation on success.
// Errors (nothing else changes): kNotFound when the unit has no such parameter, naming `name`,
// the use and the unit and listing the unit's parameters with their shapes (and, for a
// parameter of another unit, that unit: a tied weight belongs to the unit whose use this is not);
// kFailedPrecondition when call.layout is null (a UnitCall not made by a UnitRunner), the unit is
// not in it, or `views` has another count than the unit's parameters (the message gives both).
// Threading: as the callback's (the layout is immutable).
StatusOr<TensorView> ParamByName(const UnitCall& call, const std::vector<TensorView>& views,
                                 const std::string& name);

struct UnitCallbacks {
  // Forward of one use with the gathered parameter views (compute dtype, PyTorch shapes).
  std::function<Status(const UnitCall& call, const std::vector<TensorView>& params)> forward;
  // Backward of one use: parameter views as in forward, and the unit's gradient views (reduce
  // dtype) to write (accumulate == false) or add to (accumulate == true).
  std::function<Status(const UnitCall& call, const std::vector<TensorView>& params,
                       const std::vector<TensorView>& grads)>
      backward;
  // Optional: called between the last forward and the first backward of a micro-batch (the loss
  // and the gradient that seeds the backward).
  std::function<Status(int64_t micro_batch)> loss;
  // True when backward with accumulate == false writes every element of every gradient view
  // (e.g. a GEMM that assigns dW): the runner then asks for the unit's gradient buffer without
  // zeroing it first (UnitGrads(u, false)). Applies to backward_params alike.
  bool backward_overwrites = false;
  // Optional split backward, used instead of `backward` when both are set (the runner then also
  // defers the prefetch, see Schedule). backward_input does
  // the part that reads the parameters (e.g. the input gradient dx = dy W); backward_params then
  // writes (or, with accumulate, adds to) the parameter gradients, which must not read the
  // parameters (e.g. dW = dy^T x, db). Between the two the runner releases the use's parameter
  // reference, so when that was the unit's last reference the gradient buffer takes the memory
  // of the released parameter buffer (the store's buffer cache hands the same bytes back when
  // compute and reduce dtypes have one size): one unit-sized buffer live instead of two at the
  // backward's peak. The results are those of `backward` doing both parts.
  std::function<Status(const UnitCall& call, const std::vector<TensorView>& params)> backward_input;
  std::function<Status(const UnitCall& call, const std::vector<TensorView>& grads)> backward_params;
  bool split_backward() const { return backward_input && backward_params; }
};

// A model written as a class: its per-use forward and backward as methods. Callbacks() binds
// them (no loss callback: set one on the result when needed). The object must outlive the
// callbacks.
class UnitModule {
 public:
  virtual ~UnitModule() = default;
  virtual Status ForwardUse(const UnitCall& call, const std::vector<TensorView>& params) = 0;
  virtual Status BackwardUse(const UnitCall& call, const std::vector<TensorView>& params,
                             const std::vector<TensorView>& grads) = 0;
  UnitCallbacks Callbacks();
};

class UnitRunner {
 public:
  // Checks the schedule against the store's units. The store must outlive the runner.
  static StatusOr<UnitRunner> Create(ShardedParameterStore* store, UnitSchedule schedule);

  // One micro-batch's forward, loss and backward (collective; see above). `micro_batch` is
  // passed to the callbacks.
  Status ForwardBackward(const UnitCallbacks& cb, int64_t micro_batch = 0);
  // One optimizer step's gradients: ZeroGrad, then for m = 0..micro_batches-1 prepare(m) (may be
  // null; e.g. load the micro-batch) and ForwardBackward(cb, m), then CheckGradsReady.
  Status Step(int64_t micro_batches, const std::function<Status(int64_t)>& prepare,
              const UnitCallbacks& cb);
  // Forward only (collective): mode kEval, no unit stays gathered.
  Status Forward(const UnitCallbacks& cb);

  const UnitSchedule& schedule() const { return schedule_; }
  size_t num_uses() const { return schedule_.units.size(); }

  // Optional trace of the store calls the runner makes, one entry each ("gather 3", "wait 3",
  // "release_fwd 3", "release 3", "rs 3", "rs_wait 3", "forward 2", "recompute 2", "backward 2",
  // "backward_input 2", "backward_params 2" with the USE index for callbacks and the UNIT index for
  // store calls). For tests; null = off.
  void set_trace(std::vector<std::string>* trace) { trace_ = trace; }
  // Optional profile of ForwardBackward (not of Forward): adds the forward callbacks and the loss
  // callback under Phase::kForward, recomputations and backward callbacks under kBackward, the
  // time blocked in WaitGather under kGatherWait and in a reduce-scatter's Wait under
  // kReduceScatterWait. On a CUDA store these are host times (callbacks only queue work). Null =
  // off; `times` must outlive its use.
  void set_phase_times(PhaseTimes* times) { times_ = times; }

 private:
  UnitRunner(ShardedParameterStore* store, UnitSchedule schedule);
  Status RunForward(const UnitCallbacks& cb, int64_t micro_batch, bool train);
  // times_ while a training pass runs, else null (evaluation is not profiled here).
  PhaseTimes* Timing(bool train) const { return train ? times_ : nullptr; }
  Status RunBackward(const UnitCallbacks& cb, int64_t micro_batch);
  Status WaitReduceScatter(ReduceScatterHandle* h);
  bool recompute(size_t use) const {
    return !schedule_.recompute.empty() && schedule_.recompute[use];
  }
  void Trace(const char* what, size_t index);
  // UnitCall::progress for this runner's store.
  std::function<void()> Progress() const;
  // Progresses the collectives in flight, runs the callback, progresses them again.
  Status RunCallback(const std::function<Status()>& callback);
  // Prefixes a failure with the use and unit.
  Status AtUse(Status st, const char* phase, size_t use) const;

  ShardedParameterStore* store_;
  UnitSchedule schedule_;
  // last_bwd_use_[i]: use i is its unit's last backward use (= first forward use).
  std::vector<bool> last_bwd_use_;
  std::vector<std::string>* trace_ = nullptr;
  PhaseTimes* times_ = nullptr;
};

}  // namespace shardema

#endif  // SHARDEMA_FSDP_UNIT_RUNNER_H_
