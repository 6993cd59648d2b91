// step_roofline: the parts of one train_mlp step, each alone, for bench/step_bench's
// step_efficiency = bound / step time.
//
//   mpirun -np W bazel-bin/bench/step_roofline --layers 256,1024,768,256,16 --batch 48
//       [--threads 1] [--repeats 10]
//
// compute  the MLP's forward and backward of batch/W rows through the same nn code (LinearForward,
//          ActivationForward gelu, LinearBackward, ActivationBackward) and CPU ISA as train_mlp;
// comm     the step's collectives through the same MpiCommunicator: each unit's parameters
//          all-gathered for the forward and (but the last) again for the backward, each unit's
//          gradient reduce-scattered, and two scalar all-reduces (loss, gradient norm); 0 at W = 1
//          (a single rank needs no communication);
// optim    the fused AdamW + 2 EMA pass (optim/fused_step.h) over the rank's 1/W shard.
// bound = max(compute, comm) + optim: a step that overlaps all communication with compute.
// serial = compute + comm + optim: the bound when the collectives cannot overlap compute because
//          the same cores move them (shared-memory MPI: each rank's copies and ring additions run
//          on its own core, and with as many ranks as cores no core is left over).
// Each part: median over --repeats runs (after one warm-up), max over ranks (bench/roofline.h).
// Rank 0 prints one JSON line {"world", "compute_ms", "comm_ms", "optim_ms", "bound_ms",
// "serial_ms", "cpu_isa"}.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/roofline.h"
#include "framework/cpu_isa.h"
#include "framework/device.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/status.h"
#include "nn/activation.h"
#include "nn/cpu_context.h"
#include "nn/linear.h"

namespace shardema {
namespace {

using bench::Floats;

int Main(int argc, char** argv) {
  CLI::App app{"step_roofline: one train_mlp step's compute, collectives and optimizer alone"};
  std::string layers_s = "256,1024,768,256,16";
  int64_t batch = 48;
  int threads = 1, repeats = 10;
  app.add_option("--layers", layers_s, "D0,D1,...,DL")->capture_default_str();
  app.add_option("--batch", batch, "global batch")->capture_default_str();
  app.add_option("--threads", threads, "compute threads per rank")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs of each part")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> d;
  std::stringstream ss(layers_s);
  for (std::string tok; std::getline(ss, tok, ',');) d.push_back(std::stoll(tok));
  if (d.size() < 2 || batch < 1 || repeats < 1 || threads < 1) {
    std::fprintf(stderr,
                 "step_roofline: need >= 2 layer sizes, positive --batch/--repeats/--threads\n");
    return 2;
  }
  StatusOr<CpuIsa> isa = CpuIsaFromEnv();
  if (!isa.ok() || !SetCpuIsa(*isa).ok()) {
    std::fprintf(stderr, "step_roofline: %s\n", isa.status().ToString().c_str());
    return 2;
  }
  CommOptions co;
  co.check_args = false;  // as train_mlp --no-comm-checks in step_bench
  StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(co);
  if (!comm.ok()) {
    std::fprintf(stderr, "step_roofline: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator& c = **comm;
  const int world = c.world_size();
  const int64_t rows = batch / world, L = int64_t(d.size()) - 1;
  const nn::CpuContext ctx(threads);
  const nn::Activation act = nn::Activation::kGelu;

  // Buffers: parameters, gradients, activations; all allocated here, none in a timed part.
  Status alloc_status;
  auto make = [&](int64_t n, float value) {
    StatusOr<Floats> f = Floats::Make(size_t(n), value);
    if (!f.ok()) {
      if (alloc_status.ok()) alloc_status = f.status();
      return Floats();
    }
    return std::move(f).value();
  };
  std::vector<Floats> w, b, dw, db, z, a;
  int64_t total = 0, widest = 0;
  std::vector<int64_t> unit_numel(L);
  for (int64_t i = 0; i < L; ++i) {
    w.push_back(make(d[i + 1] * d[i], 0.01f));
    b.push_back(make(d[i + 1], 0.f));
    dw.push_back(make(d[i + 1] * d[i], 0.f));
    db.push_back(make(d[i + 1], 0.f));
    z.push_back(make(rows * d[i + 1], 0.f));
    a.push_back(make(rows * d[i], 0.5f));
    unit_numel[i] = d[i + 1] * d[i] + d[i + 1];
    total += unit_numel[i];
    widest = std::max({widest, d[i], d[i + 1]});
  }
  a.push_back(make(rows * d[L], 0.f));
  Floats dy = make(rows * widest, 0.f), dx = make(rows * widest, 0.f);
  auto compute = [&]() -> Status {
    for (int64_t i = 0; i < L; ++i) {
      nn::LinearForward(ctx, a[i].data(), w[i].data(), b[i].data(), rows, d[i], d[i + 1],
                        z[i].data());
      if (i + 1 < L)
        nn::ActivationForward(ctx, act, z[i].data(), a[i + 1].data(), int64_t(z[i].size()));
    }
    std::copy(z[L - 1].data(), z[L - 1].data() + z[L - 1].size(), dy.data());
    for (int64_t k = L - 1; k >= 0; --k) {
      nn::LinearBackward(ctx, a[k].data(), w[k].data(), dy.data(), rows, d[k], d[k + 1],
                         dw[k].data(), db[k].data(), k > 0 ? dx.data() : nullptr);
      if (k > 0) {
        nn::ActivationBackward(ctx, act, z[k - 1].data(), dx.data(), dy.data(), rows * d[k]);
      }
    }
    return Status::Ok();
  };

  // Collectives on per-unit flat buffers padded to a multiple of the world size.
  std::vector<Floats> full, shard;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t per = (unit_numel[i] + world - 1) / world;
    full.push_back(make(per * world, 1.f));
    shard.push_back(make(per, 0.f));
  }
  auto comms = [&]() -> Status {
    if (world == 1) return Status::Ok();
    for (int64_t i = 0; i < L; ++i) {
      RETURN_IF_ERROR(c.AllGather(shard[i].data(), full[i].data(), shard[i].size(), DType::kF32));
    }
    for (int64_t k = L - 1; k >= 0; --k) {
      if (k < L - 1) {
        RETURN_IF_ERROR(c.AllGather(shard[k].data(), full[k].data(), shard[k].size(), DType::kF32));
      }
      RETURN_IF_ERROR(
          c.ReduceScatter(full[k].data(), shard[k].data(), shard[k].size(), DType::kF32));
    }
    float s = 1.f, r = 0.f;
    RETURN_IF_ERROR(c.AllReduce(&s, &r, 1, DType::kF32));
    return c.AllReduce(&s, &r, 1, DType::kF32);
  };

  if (!alloc_status.ok()) {
    std::fprintf(stderr, "step_roofline: %s\n", alloc_status.ToString().c_str());
    return 1;
  }
  // The fused AdamW + 2 EMA pass over this rank's shard.
  StatusOr<bench::OptimizerPart> optim = bench::OptimizerPart::Make((total + world - 1) / world,
                                                                    /*num_emas=*/2, threads);
  StatusOr<bench::RooflineParts> parts =
      optim.ok() ? bench::TimeParts(
                       &c, compute, comms, [&] { return optim->Run(); }, repeats)
                 : optim.status();
  if (!parts.ok()) {
    std::fprintf(stderr, "step_roofline: %s\n", parts.status().ToString().c_str());
    return 1;
  }
  if (c.rank() == 0) {
    std::printf("%s\n", bench::RooflineJson(world, *parts, CpuIsaName(*isa)).c_str());
  }
  comm->reset();
  return MpiCommunicator::FinalizeMpi().ok() ? 0 : 1;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
