#include "tests/training_rig.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace shardema {
namespace testing {

StatusOr<TrainingRig> MakeTrainingRig(const RigSpec& spec, Communicator* comm) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedParameterStore> store,
                   ShardedParameterStore::Create(spec.units, spec.buffers, comm, spec.store));
  const InitFn init = spec.init;
  RETURN_IF_ERROR(store->InitFromFunction([&init](const ParamLayout& p, float* out) {
    for (int64_t i = 0; i < p.numel; ++i) out[i] = init ? init(p.name, i) : 0.f;
    return Status::Ok();
  }));
  TrainingRig rig;
  ASSIGN_OR_RETURN(rig.state, TrainState::Create(std::move(store), spec.emas, spec.optimizer));
  rig.store = rig.state->store();
  rig.emas = rig.state->emas();
  rig.opt = rig.state->optimizer();
  return rig;
}

Status FeedGrads(ShardedParameterStore* store, const GradFn& grad) {
  RETURN_IF_ERROR(store->ZeroGrad());
  for (size_t u = 0; u < store->num_units(); ++u) {
    ASSIGN_OR_RETURN(std::vector<TensorView> g, store->UnitGrads(u));
    const UnitLayout& ul = store->layout().units()[u];
    for (size_t p = 0; p < ul.params.size(); ++p) {
      for (int64_t i = 0; i < ul.params[p].numel; ++i) {
        StoreFromF32(g[p].data, g[p].dtype, size_t(i), grad(store->rank(), ul.params[p].name, i));
      }
    }
    RETURN_IF_ERROR(store->ReduceScatterGrads(u));
  }
  return Status::Ok();
}

InitFn WaveInit(double freq, double scale) {
  return [freq, scale](const std::string& name, int64_t i) {
    return float(scale * std::cos(freq * double(i) + double(name.size())));
  };
}

StepGradFn WaveGrad(double a, double b, double c, double d) {
  return [a, b, c, d](int step, int rank, const std::string& name, int64_t i) {
    return float(std::sin(a * double(i) + b * step + c * rank + d * double(name.size())));
  };
}

FullParams InitialParams(const StoreLayout& layout, const InitFn& init) {
  FullParams out;
  for (const UnitLayout& u : layout.units()) {
    for (const ParamLayout& p : u.params) {
      auto& v = out[p.name];
      for (int64_t i = 0; i < p.numel; ++i) v.push_back(init(p.name, i));
    }
  }
  return out;
}

double MaxLocalError(const ShardedParameterStore& store, const float* slot, const FullParams& ref) {
  double err = 0;
  for (const LocalParamPiece& pc : store.layout().LocalPieces(store.rank())) {
    const std::vector<double>& r = ref.at(store.layout().units()[pc.unit].params[pc.param].name);
    for (int64_t k = 0; k < pc.numel; ++k) {
      err = std::max(err,
                     std::fabs(double(slot[pc.local_begin + k]) - r[size_t(pc.param_begin + k)]));
    }
  }
  return err;
}

EmaConfig MakeEma(const std::string& name, EmaScheduleKind kind, double decay, int64_t start_step,
                  int64_t interval, bool correct_interval) {
  EmaConfig c;
  c.name = name;
  c.kind = kind;
  c.decay = decay;
  c.start_step = start_step;
  c.interval = interval;
  c.correct_interval = correct_interval;
  return c;
}

}  // namespace testing
}  // namespace shardema
