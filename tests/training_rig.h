// Test helpers: a TrainState (store + EMA slots + optimizer) built in one call, gradients fed from
// a formula, and comparisons of local shards against full (unsharded) references.
#ifndef SHARDEMA_TESTS_TRAINING_RIG_H_
#define SHARDEMA_TESTS_TRAINING_RIG_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ema/ema_slots.h"
#include "fsdp/store.h"
#include "optim/optimizer.h"
#include "train/train_state.h"

namespace shardema {
namespace testing {

struct TrainingRig {
  std::unique_ptr<TrainState> state;
  ShardedParameterStore* store = nullptr;  // the state's components
  EmaSlots* emas = nullptr;                // null without EMA configs
  Optimizer* opt = nullptr;
};

// Parameter name -> flattened full values.
using FullParams = std::map<std::string, std::vector<double>>;
// init(name, i): initial value of element i of a parameter.
using InitFn = std::function<float(const std::string& name, int64_t i)>;
// grad(rank, name, i): the gradient a rank writes for element i of a parameter.
using GradFn = std::function<float(int rank, const std::string& name, int64_t i)>;

// grad(step, rank, name, i): the gradient of a multi-step test.
using StepGradFn = std::function<float(int step, int rank, const std::string& name, int64_t i)>;

// Test data that depends only on the parameter name and the element (and step and rank), never
// on the sharding, so every world size sees the same model:
//   WaveInit: scale * cos(freq * i + |name|)
//   WaveGrad: sin(a * i + b * step + c * rank + d * |name|)
InitFn WaveInit(double freq, double scale = 1.0);
StepGradFn WaveGrad(double a, double b, double c, double d = 1.0);

struct RigSpec {
  std::vector<UnitSpec> units;
  std::vector<ParamSpec> buffers;
  StoreOptions store;
  InitFn init;
  std::vector<EmaConfig> emas;
  OptimizerOptions optimizer;
};

// Store over `comm` initialised from spec.init, EMA slots (when any), then the optimizer.
StatusOr<TrainingRig> MakeTrainingRig(const RigSpec& spec, Communicator* comm);

// ZeroGrad, then for every unit: write grad(rank, name, i) into the unit gradient buffer and
// reduce-scatter it (one micro-batch).
Status FeedGrads(ShardedParameterStore* store, const GradFn& grad);

// The full initial parameters of a layout per `init`, in double.
FullParams InitialParams(const StoreLayout& layout, const InitFn& init);

// max |slot[local element] - ref[name][element]| over this rank's parameter pieces.
double MaxLocalError(const ShardedParameterStore& store, const float* slot, const FullParams& ref);

EmaConfig MakeEma(const std::string& name, EmaScheduleKind kind, double decay,
                  int64_t start_step = 0, int64_t interval = 1, bool correct_interval = true);

}  // namespace testing
}  // namespace shardema

#endif  // SHARDEMA_TESTS_TRAINING_RIG_H_
