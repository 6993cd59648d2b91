// gpt_roofline: the parts of one train_gpt step alone, for bench/gpt_step_bench's
// step_efficiency = bound / step time (bench/roofline.h: the parts, bound and serial).
//
//   mpirun -np W bazel-bin/examples/gpt_roofline --n-layer 4 --n-head 4 --n-embd 128
//       --block-size 64 --batch 16 [--threads 1] [--repeats 10]
//
// compute  GptModel::ForwardBackward (examples/gpt_model.h, the code train_gpt runs) of this
//          rank's batch/W sequences of T tokens, on a one-rank store over a SelfCommunicator:
//          the whole model is local, so no collective runs and no unit is copied (the one-rank
//          store hands out views of its shard; its gradient fold, one copy of the gradients into
//          the shard, is the only work a W-rank step does not have);
// comm     exactly the collectives the model's ForwardBackward makes on the W-rank store (recorded
//          through a RecordingCommunicator over MPI in one real micro-batch: each use's
//          all-gather, each unit's reduce-scatter, in order), plus the step's two scalar ones
//          (the loss all-reduce and the gradient norm's all-gather of 8 bytes), issued again
//          one after another, blocking; 0 at W = 1;
// optim    the fused AdamW + 2 EMA pass over the rank's shard of the W-rank layout.
// Tokens are random bytes (the work does not depend on them). All ranks run every part at the
// same time. Rank 0 prints one JSON line (bench/roofline.h RooflineJson).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/roofline.h"
#include "examples/dataset.h"
#include "examples/gpt_model.h"
#include "framework/cpu_isa.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/self_communicator.h"
#include "framework/status.h"
#include "fsdp/store.h"

namespace shardema {
namespace {

using examples::GptModel;
using examples::GptShape;

// A store of the GPT's units over `comm`, initialised as train_gpt does, and the model on it.
struct GptOnStore {
  std::unique_ptr<ShardedParameterStore> store;
  std::unique_ptr<GptModel> model;
};

StatusOr<GptOnStore> MakeGpt(Communicator* comm, const GptShape& shape, int threads) {
  GptOnStore g;
  ASSIGN_OR_RETURN(g.store, ShardedParameterStore::Create(examples::GptUnits(shape), {}, comm));
  RETURN_IF_ERROR(examples::InitGptFromSeed(g.store.get(), shape, /*seed=*/0));
  ASSIGN_OR_RETURN(g.model, GptModel::Create(g.store.get(), shape, threads, /*recompute=*/false));
  return g;
}

// One micro-batch as the trainer runs it: gradients zeroed, forward and backward.
Status Step(GptOnStore& g, const Batch& batch) {
  RETURN_IF_ERROR(g.store->ZeroGrad());
  return g.model->ForwardBackward(batch).status();
}

Status Run(const GptShape& shape, int64_t batch, int threads, int repeats) {
  ASSIGN_OR_RETURN(CpuIsa isa, CpuIsaFromEnv());
  RETURN_IF_ERROR(SetCpuIsa(isa));
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi, MpiCommunicator::Create());
  const int world = mpi->world_size();
  if (batch % world != 0) {
    return InvalidArgument("--batch ", batch, " is not divisible by the world size ", world);
  }
  // This rank's batch/W sequences of T + 1 random tokens.
  Batch b;
  b.rows = batch / world;
  std::mt19937_64 rng(uint64_t(mpi->rank()) + 1);
  for (int64_t i = 0; i < b.rows * (shape.block_size + 1); ++i) {
    b.tokens.push_back(int64_t(rng() % uint64_t(shape.vocab)));
  }

  // The collectives of one micro-batch on the W-rank store, recorded, then the step's scalars.
  bench::RecordingCommunicator recorder(mpi.get());
  std::vector<bench::RecordedCall> calls;
  int64_t local_numel = 0;
  {
    ASSIGN_OR_RETURN(GptOnStore sharded, MakeGpt(&recorder, shape, threads));
    recorder.Clear();  // only the step's own collectives
    RETURN_IF_ERROR(Step(sharded, b));
    local_numel = sharded.store->layout().local_numel();
    calls = recorder.calls();
  }
  bench::RecordedCall loss, norm;
  loss.kind = CollectiveKind::kAllReduce;
  loss.count = 1;
  loss.op = ReduceOp::kAvg;
  norm.kind = CollectiveKind::kAllGather;
  norm.count = sizeof(double);
  norm.dtype = DType::kU8;
  calls.push_back(loss);
  calls.push_back(norm);
  if (world == 1) calls.clear();  // one rank: no communication at all
  ASSIGN_OR_RETURN(bench::CollectiveReplay comms, bench::CollectiveReplay::Make(mpi.get(), calls));

  // The model alone: a one-rank store on every rank.
  SelfCommunicator self;
  ASSIGN_OR_RETURN(GptOnStore local, MakeGpt(&self, shape, threads));
  ASSIGN_OR_RETURN(bench::OptimizerPart optim,
                   bench::OptimizerPart::Make(local_numel, /*num_emas=*/2, threads));
  ASSIGN_OR_RETURN(bench::RooflineParts parts,
                   bench::TimeParts(
                       mpi.get(), [&] { return Step(local, b); }, [&] { return comms.Run(); },
                       [&] { return optim.Run(); }, repeats));
  if (mpi->rank() == 0) {
    size_t gathers = 0, scatters = 0;
    for (const bench::RecordedCall& c : calls) {
      gathers += c.kind == CollectiveKind::kAllGather ? 1 : 0;
      scatters += c.kind == CollectiveKind::kReduceScatter ? 1 : 0;
    }
    std::fprintf(stderr,
                 "# gpt_roofline: %zu collectives per step (%zu all-gathers, %zu reduce-scatters)"
                 ", %lld parameters per rank\n",
                 calls.size(), gathers, scatters, static_cast<long long>(local_numel));
    std::printf("%s\n", bench::RooflineJson(world, parts, CpuIsaName(isa)).c_str());
  }
  local = GptOnStore();
  mpi.reset();
  return MpiCommunicator::FinalizeMpi();
}

int Main(int argc, char** argv) {
  CLI::App app{"gpt_roofline: one train_gpt step's compute, collectives and optimizer alone"};
  GptShape shape;
  shape.n_layer = 4;
  shape.n_head = 4;
  shape.n_embd = 128;
  shape.block_size = 64;
  int64_t batch = 16;
  int threads = 1, repeats = 10;
  app.add_option("--n-layer", shape.n_layer, "transformer blocks")->capture_default_str();
  app.add_option("--n-head", shape.n_head, "attention heads")->capture_default_str();
  app.add_option("--n-embd", shape.n_embd, "embedding width")->capture_default_str();
  app.add_option("--block-size", shape.block_size, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", batch, "global batch (sequences)")->capture_default_str();
  app.add_option("--threads", threads, "compute and optimizer threads per rank")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs of each part")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  Status st = shape.Check();
  if (st.ok() && (batch < 1 || threads < 1 || repeats < 1)) {
    st = InvalidArgument("--batch, --threads and --repeats must be positive");
  }
  if (st.ok()) st = Run(shape, batch, threads, repeats);
  return bench::ExitWith("gpt_roofline", st);
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
