// README's UnitRunner step (readme_unit_runner.h, extracted from README.md at build time),
// instantiated with a stand-in model and run for a few steps on three units beside an EMA slot:
//   mpirun -np W readme_unit_runner
// The stand-in counts its calls; the run fails unless every use ran forward and backward once per
// micro-batch and TrainState::Step advanced the step.
#include <iostream>
#include <vector>

#include "framework/mpi/mpi_communicator.h"
#include "readme_unit_runner.h"

namespace {

struct CountingModel {
  int64_t forwards = 0, backwards = 0, losses = 0, loads = 0;
  Status Forward(size_t /*use*/, const std::vector<TensorView>& /*params*/) {
    ++forwards;
    return Status::Ok();
  }
  Status Loss(int64_t /*micro*/) {
    ++losses;
    return Status::Ok();
  }
  Status Backward(size_t /*use*/, const std::vector<TensorView>& /*params*/,
                  const std::vector<TensorView>& grads, bool add) {
    if (!add) {  // write: a zero gradient
      for (const TensorView& g : grads) {
        for (int64_t i = 0; i < g.numel(); ++i) g.as<float>()[i] = 0.f;
      }
    }
    ++backwards;
    return Status::Ok();
  }
  Status Load(int64_t /*micro*/) {
    ++loads;
    return Status::Ok();
  }
};

Status Run() {
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> comm, MpiCommunicator::Create());
  std::vector<UnitSpec> units = {{"wte", {{"wte.weight", {16, 8}}}},
                                 {"h0", {{"h0.weight", {8, 8}}, {"h0.bias", {8}}}},
                                 {"h1", {{"h1.weight", {8, 8}}, {"h1.bias", {8}}}}};
  ASSIGN_OR_RETURN(auto store, ShardedParameterStore::Create(units, /*buffers=*/{}, comm.get()));
  RETURN_IF_ERROR(store->InitFromFunction([](const ParamLayout& p, float* out) {
    for (int64_t i = 0; i < p.numel; ++i) out[i] = 0.01f * float(i % 5);
    return Status::Ok();
  }));
  EmaConfig ema;
  ema.name = "ema_0.999";
  ema.decay = 0.999;
  ASSIGN_OR_RETURN(auto state, TrainState::Create(std::move(store), {ema}, OptimizerOptions()));
  CountingModel model;
  const int64_t steps = 3;
  RETURN_IF_ERROR(TrainSteps(model, state.get(), steps));
  // 4 micro-batches per step, 4 uses per micro-batch.
  if (state->step() != steps || model.loads != steps * 4 || model.losses != steps * 4 ||
      model.forwards != steps * 4 * 4 || model.backwards != steps * 4 * 4) {
    return Internal("readme_unit_runner: step ", state->step(), ", loads ", model.loads,
                    ", losses ", model.losses, ", forwards ", model.forwards, ", backwards ",
                    model.backwards, "; expected step ", steps, " and 4 micro-batches of 4 uses");
  }
  if (comm->rank() == 0) std::cout << "readme_unit_runner: " << steps << " steps ok\n";
  return Status::Ok();
}

}  // namespace

int main() {
  const Status status = Run();
  if (!status.ok()) std::cerr << "readme_unit_runner: " << status << "\n";
  const Status finalized = MpiCommunicator::FinalizeMpi();
  return ExitCodeFor(status.ok() ? finalized : status);
}
