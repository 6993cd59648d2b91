// EMA slot storages against fp32: trains the MLP example (the train_mlp trainer, in process) with,
// for each decay 0.99, 0.999 and 0.9999, one constant-decay EMA slot of every storage (fp32, bf16,
// bf16_sr, delta_bf16), then reports for every non-fp32 slot
//   rel_l2      ||x - x_fp32|| / ||x_fp32||                (over every parameter element)
//   rel_lag     ||x - x_fp32|| / ||x_fp32 - master||       (error relative to what the EMA adds)
//   eval loss   of the slot's weights (the trainer's end-of-run evaluation)
// and the slot's bytes per rank. Ends with one `summary: key=value ...` line.
//
// Run: mpirun -np W bazel-bin/examples/ema_storage_bench [--steps 2000] [--layers 32,256,256,8]
// (extra trainer flags after --, e.g. -- --lr 1e-3).
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "examples/mlp_train.h"
#include "framework/ema_storage.h"
#include "framework/mpi/mpi_communicator.h"

namespace shardema {
namespace {

constexpr const char* kDecays[] = {"0.99", "0.999", "0.9999"};
constexpr EmaStorage kStorages[] = {EmaStorage::kF32, EmaStorage::kBF16, EmaStorage::kBF16Sr,
                                    EmaStorage::kDeltaBF16, EmaStorage::kDeltaBF16Sr};

std::string SlotName(const std::string& decay, EmaStorage s) {
  return "ema_" + decay + "_" + EmaStorageName(s);
}

// Parameters of a gathered model, flattened (buffers excluded).
std::vector<double> Flat(const std::vector<FullTensor>& t, size_t nparams) {
  std::vector<double> out;
  for (size_t i = 0; i < nparams && i < t.size(); ++i)
    out.insert(out.end(), t[i].data.begin(), t[i].data.end());
  return out;
}

double Norm(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

int Main(int argc, char** argv) {
  CLI::App app{"EMA storages (bf16, bf16_sr, delta_bf16) against fp32 slots"};
  int64_t steps = 2000;
  std::string layers = "32,256,256,8";
  std::vector<std::string> extra;
  app.add_option("--steps", steps, "training steps (>= 1)")->check(CLI::PositiveNumber);
  app.add_option("--layers", layers, "MLP layer sizes");
  app.add_option("extra", extra, "further trainer flags (after --)");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::string> args = {"--layers",
                                   layers,
                                   "--loss",
                                   "mse",
                                   "--batch",
                                   "64",
                                   "--lr",
                                   "3e-3",
                                   "--steps",
                                   std::to_string(steps),
                                   "--log-every",
                                   "0",
                                   "--synthetic-rows",
                                   "4096"};
  for (const char* d : kDecays) {
    for (EmaStorage s : kStorages) {
      args.push_back("--ema-spec");
      args.push_back(SlotName(d, s) + ":decay=" + d + ",storage=" + EmaStorageName(s));
    }
  }
  args.insert(args.end(), extra.begin(), extra.end());
  StatusOr<examples::ParsedMlpArgs> parsed = examples::ParseMlpConfig(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "ema_storage_bench: %s\n", parsed.status().ToString().c_str());
    return 2;
  }
  StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create();
  if (!comm.ok()) {
    std::fprintf(stderr, "ema_storage_bench: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  auto trainer = examples::CreateTrainer(parsed->config, comm->get());
  StatusOr<TrainSummary> summary = trainer.ok() ? (*trainer)->Run() : trainer.status();
  if (!summary.ok()) {
    std::fprintf(stderr, "ema_storage_bench: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const Trainer& t = **trainer;
  const bool lead = (*comm)->rank() == 0;
  size_t nparams = 0;
  for (const UnitLayout& u : t.store()->layout().units()) nparams += u.params.size();
  auto master_full = t.store()->GatherSlotToRank(t.store()->master(), 0);
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, int64_t> bytes;
  for (const SlotMemory& m : t.store()->registry().MemoryReport()) bytes[m.name] = m.bytes;
  for (size_t i = 0; i < t.emas()->size(); ++i) {
    const std::string& name = t.emas()->config(i).name;
    auto full = t.emas()->CopyTo(name, 0);
    if (!full.ok() || !master_full.ok()) {
      std::fprintf(stderr, "ema_storage_bench: %s\n", full.status().ToString().c_str());
      return 1;
    }
    values[name] = Flat(*full, nparams);
  }
  if (!lead) return 0;
  std::map<std::string, double> eval;
  for (const auto& [name, loss] : summary->final_eval.losses) eval[name] = loss;
  const std::vector<double> master = Flat(*master_full, nparams);
  std::printf(
      "# ema_storage_bench: %lld steps, layers %s, %d rank(s), %zu parameters, "
      "state bytes per rank %lld, eval loss live %.9g\n",
      static_cast<long long>(steps), layers.c_str(), (*comm)->world_size(), master.size(),
      static_cast<long long>(t.store()->StateBytesPerRank()), eval["live"]);
  std::printf("%-8s %-13s %12s %12s %14s %12s\n", "decay", "storage", "rel_l2", "rel_lag",
              "eval loss", "bytes/rank");
  std::string summary_line = "summary: steps=" + std::to_string(steps);
  char buf[160];
  for (const char* d : kDecays) {
    const std::vector<double>& ref = values[SlotName(d, EmaStorage::kF32)];
    const double ref_norm = Norm(ref, std::vector<double>(ref.size(), 0.0));
    const double lag = Norm(ref, master);
    for (EmaStorage s : kStorages) {
      const std::string name = SlotName(d, s);
      const double err = Norm(values[name], ref);
      std::printf("%-8s %-13s %12.3e %12.3e %14.9g %12lld\n", d, EmaStorageName(s), err / ref_norm,
                  err / lag, eval[name], static_cast<long long>(bytes[name]));
      if (s == EmaStorage::kF32) continue;
      std::snprintf(buf, sizeof(buf), " rel_l2_%s_%s=%.3e", d, EmaStorageName(s), err / ref_norm);
      summary_line += buf;
    }
  }
  std::snprintf(buf, sizeof(buf), " fp32_bytes_per_rank=%lld bf16_bytes_per_rank=%lld ranks=%d",
                static_cast<long long>(bytes[SlotName("0.99", EmaStorage::kF32)]),
                static_cast<long long>(bytes[SlotName("0.99", EmaStorage::kDeltaBF16)]),
                (*comm)->world_size());
  std::printf("%s%s\n", summary_line.c_str(), buf);
  return 0;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
