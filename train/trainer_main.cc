#include "train/trainer_main.h"

#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "framework/cpu_features.h"
#include "framework/cpu_isa.h"
#include "framework/logging.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/rank_env.h"
#include "framework/status.h"
#include "train/device_comm.h"
#include "train/trainer.h"

namespace shardema {
namespace {

int Finish(const char* program, const Status& st, bool print) {
  if (!st.ok() && print) {
    LOG_ERROR << program << ": " << st.ToString();
  }
  Status fin = MpiCommunicator::FinalizeMpi();
  if (!fin.ok()) {
    LOG_ERROR << program << ": " << fin.ToString();
  }
  return ExitCodeFor(st.ok() ? fin : st);
}

// Control bytes other than newline and tab shown as '.', so a sample cannot garble a terminal.
std::string Printable(const std::string& text) {
  std::string out = text;
  for (char& ch : out) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if ((u < 32 && ch != '\n' && ch != '\t') || u == 127) ch = '.';
  }
  return out;
}

// Each value rounded to a multiple of `unit` (the bench JSON's per-step times: 1 us).
std::vector<double> RoundedTo(const std::vector<double>& v, double unit) {
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v) out.push_back(std::round(x / unit) * unit);
  return out;
}

}  // namespace

int TrainerMain(int argc, char** argv, const TrainerBinary& binary) {
  const char* program = binary.flags.program.c_str();
  if (binary.config == nullptr || !binary.make_model) {
    std::fprintf(stderr, "%s: TrainerBinary needs a config and make_model\n", program);
    return ExitCodeFor(InvalidArgument("TrainerBinary"));
  }
  if (binary.mmap_threshold_bytes > 0) mallopt(M_MMAP_THRESHOLD, binary.mmap_threshold_bytes);
  StatusOr<RankEnv> env = DiscoverRankEnv();
  const bool lead = !env.ok() || env->rank == 0;
  StatusOr<ParsedArgs> parsed = ParseTrainArgs(argc, argv, binary.config, binary.flags);
  if (!parsed.ok()) {
    if (lead)
      std::fprintf(stderr, "%s: %s\n(see --help)\n", program, parsed.status().ToString().c_str());
    return ExitCodeFor(parsed.status());
  }
  if (parsed->help) {
    if (lead) std::cout << parsed->help_text;
    return 0;
  }
  const TrainConfig& config = *binary.config;
  if (lead) {
    for (const std::string& w : parsed->warnings) LOG_WARNING << program << ": " << w;
#ifndef __OPTIMIZE__
    // Bazel's default compilation mode (fastbuild) is -O0: the layers run tens of times slower.
    LOG_WARNING << program
                << ": built without optimisation (-O0): steps run many times slower; build with "
                   "--copt=-O2 (the .bazelrc lines of the README's \"Depending on shardema\")";
#endif
  }

  // The GPU is chosen before MPI_Init (best effort; errors are reported collectively below).
  SelectGpuBeforeMpi(config).status().IgnoreError();
  CommOptions co;
  co.check_args = config.comm_checks;
  co.timeout_seconds = config.collective_timeout;
  co.reduce_scatter_algorithm = config.reduce_scatter;
  co.progress_thread = config.comm_thread;
  StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(co);
  if (!comm.ok()) return Finish(program, comm.status(), true);
  const bool rank0 = (*comm)->rank() == 0;
  if (config.async_save && rank0 && CpusAllowed() == 1 && std::thread::hardware_concurrency() > 1) {
    LOG_WARNING << program
                << ": --async-save: rank 0 may run on one core only (mpirun binds each of up to 2 "
                   "ranks to a core by default), so the background writer takes its CPU from the "
                   "training steps; launch with mpirun --bind-to none, or --map-by slot:PE=2, to "
                   "give it a core of its own";
  }

  // --device cuda: the NCCL communicator of the store, on the rank's GPU (null for the CPU).
  StatusOr<std::unique_ptr<Communicator>> device_comm =
      CreateDeviceCommunicator(config, comm->get());
  if (!device_comm.ok()) {
    comm->reset();
    return Finish(program, device_comm.status(), rank0);
  }
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, binary.make_model(), comm->get(), device_comm->get());
  if (!trainer.ok()) {
    // Setup errors are agreed by all ranks; should one not be, its peers waiting in a setup
    // collective are told (they fail naming this rank) instead of waiting for the timeout.
    (*comm)->AnnounceFailure(trainer.status()).IgnoreError();
    device_comm->reset();
    comm->reset();
    return Finish(program, trainer.status(), rank0);
  }
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  if (!summary.ok()) {
    LOG_ERROR << program << ": " << summary.status().ToString();
    const int code = ExitCodeFor(summary.status());
    if ((*comm)->world_size() > 1) {
      // Peers may wait in a collective this rank never joins: abort, never synchronise or
      // finalize (the device communicator first: ncclCommAbort; then MPI_Abort, after every peer
      // had a few seconds to report its own error). Does not return.
      if (*device_comm != nullptr) (*device_comm)->Abort(summary.status(), code);
      (*comm)->Abort(summary.status(), code);
    }
    trainer->reset();
    device_comm->reset();
    comm->reset();
    return Finish(program, summary.status(), false);
  }
  if (rank0) {
    std::cout << FormatEvalTable(summary->final_eval);
    for (const auto& sample : summary->samples) {
      std::cout << "---- sample (" << sample.first << ") ----\n"
                << Printable(sample.second) << "\n";
    }
    if (!summary->last_checkpoint.empty())
      std::cout << "checkpoint: " << summary->last_checkpoint << "\n";
    if (config.profile) {
      const int64_t steps = summary->final_step - summary->start_step;
      std::cout << "profile (rank 0, " << steps
                << " steps; waits are time blocked in a collective):\n"
                << summary->phases.Format(steps, summary->run_ms)
                << (*trainer)->model().ProfileReport();
    }
    if (config.bench_json) {
      nlohmann::json j = {
          {"world", (*comm)->world_size()},
          {"step_ms", summary->timing.median_step_ms},
          {"cpu_ms", summary->timing.median_step_cpu_ms},
          {"run_cpu_ms", summary->timing.run_cpu_ms},
          {"loop_ms", summary->loop_ms},
          {"steps_ms", RoundedTo(summary->timing.step_ms, 0.001)},
          {"steps_start_unix_ms", RoundedTo(summary->timing.step_start_unix_ms, 0.001)},
          {"peak_rss_mib", summary->timing.peak_rss_mib},
          {"cpu_isa", CpuIsaName(ActiveCpuIsa())},
          {"compute_threads", config.compute_threads},
          {"timed_steps", summary->timing.timed_steps},
          {"state_bytes_per_rank", summary->state_bytes_per_rank},
          {"grad_bytes_per_rank", summary->grad_bytes_per_rank},
          {"compute_bytes_per_rank", summary->compute_bytes_per_rank},
          {"unit_peak_bytes", summary->unit_peak_bytes},
          {"params", summary->num_params},
          {"sent_bytes_per_step",
           {{"in_group", summary->sent_bytes_in_group_per_step},
            {"across_groups", summary->sent_bytes_across_groups_per_step}}},
          {"batch", config.batch},
          {"device", (*trainer)->device().ToString()}};
      // GPU: the device memory in use, per rank (train/step_timing.h).
      if (!summary->timing.peak_device_used_mib.empty()) {
        j["peak_device_used_mib"] = summary->timing.peak_device_used_mib;
        j["peak_device_allocated_mib"] = summary->timing.peak_device_allocated_mib;
      }
      j.update((*trainer)->model().BenchJson());
      std::cout << j.dump() << "\n";
    }
    std::cout.flush();
  }
  trainer->reset();
  device_comm->reset();
  comm->reset();
  return Finish(program, Status::Ok(), false);
}

}  // namespace shardema
