// train_mlp: the reference training binary. `mpirun -np W train_mlp --help` lists the flags;
// examples/trainer.h describes the loop. This file only parses, runs and maps errors to exit
// codes (0 ok, 2 invalid argument, 3 not found, 4 data loss, 1 other).
//
// Errors found while setting up (flags, data, init, resume) are agreed by all ranks, so every
// rank exits with the same code after a clean MPI shutdown and rank 0 prints the message. An
// error during training may hit one rank only while its peers wait in a collective: that rank
// prints it and aborts the MPI job with the exit code.
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "examples/device_comm.h"
#include "examples/train_config.h"
#include "examples/trainer.h"
#include "framework/logging.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/rank_env.h"
#include "framework/status.h"
#include "nn/cpu_isa.h"

namespace shardema::examples {
namespace {

int Finish(const Status& st, bool print) {
  if (!st.ok() && print) {
    LOG_ERROR << "train_mlp: " << st.ToString();
  }
  Status fin = MpiCommunicator::FinalizeMpi();
  if (!fin.ok()) {
    LOG_ERROR << "train_mlp: " << fin.ToString();
  }
  return ExitCodeFor(st.ok() ? fin : st);
}

int Main(int argc, char** argv) {
  StatusOr<RankEnv> env = DiscoverRankEnv();
  const bool lead = !env.ok() || env->rank == 0;
  StatusOr<ParsedArgs> parsed = ParseTrainConfig(argc, argv);
  if (!parsed.ok()) {
    if (lead) std::fprintf(stderr, "train_mlp: %s\n(see --help)\n", parsed.status().ToString().c_str());
    return ExitCodeFor(parsed.status());
  }
  if (parsed->help) {
    if (lead) std::cout << parsed->help_text;
    return 0;
  }
  const TrainConfig& config = parsed->config;

  CommOptions co;
  co.check_args = config.comm_checks;
  StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(co);
  if (!comm.ok()) return Finish(comm.status(), true);
  const bool rank0 = (*comm)->rank() == 0;

  // --device cuda: the NCCL communicator of the store, on the rank's GPU (null for the CPU).
  StatusOr<std::unique_ptr<Communicator>> device_comm = CreateDeviceCommunicator(config, comm->get());
  if (!device_comm.ok()) {
    comm->reset();
    return Finish(device_comm.status(), rank0);
  }
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(config, comm->get(), device_comm->get());
  if (!trainer.ok()) {
    device_comm->reset();
    comm->reset();
    return Finish(trainer.status(), rank0);
  }
  StatusOr<TrainSummary> summary = (*trainer)->Run();
  if (!summary.ok()) {
    LOG_ERROR << "train_mlp: " << summary.status().ToString();
    const int code = ExitCodeFor(summary.status());
    if ((*comm)->world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    trainer->reset();
    device_comm->reset();
    comm->reset();
    return Finish(summary.status(), false);
  }
  if (rank0) {
    std::cout << FormatEvalTable(summary->final_eval);
    if (!summary->last_checkpoint.empty()) std::cout << "checkpoint: " << summary->last_checkpoint << "\n";
    if (config.profile) {
      std::cout << "profile (rank 0, " << summary->final_step - summary->start_step
                << " steps; waits are time blocked in a collective):\n"
                << summary->phases.Format(summary->final_step - summary->start_step,
                                          summary->run_ms);
    }
    if (config.bench_json) {
      nlohmann::json j = {{"world", (*comm)->world_size()},
                          {"step_ms", summary->median_step_ms},
                          {"cpu_ms", summary->median_step_cpu_ms},
                          {"peak_rss_mib", summary->peak_rss_mib},
                          {"cpu_isa", nn::CpuIsaName(nn::ActiveCpuIsa())},
                          {"compute_threads", config.compute_threads},
                          {"timed_steps", summary->timed_steps},
                          {"state_bytes_per_rank", summary->state_bytes_per_rank},
                          {"params", summary->num_params},
                          {"layers", config.layers},
                          {"batch", config.batch},
                          {"device", (*trainer)->device().ToString()}};
      std::cout << j.dump() << "\n";
    }
    std::cout.flush();
  }
  trainer->reset();
  device_comm->reset();
  comm->reset();
  return Finish(Status::Ok(), false);
}

}  // namespace
}  // namespace shardema::examples

int main(int argc, char** argv) { return shardema::examples::Main(argc, argv); }
