// TrainerMain: the main() of a training binary (a few lines: train/README.md). `mpirun -np W
// BINARY --help` lists the model's flags and the trainer's; train/trainer.h describes the loop.
// It parses (ParseTrainArgs with the binary's ModelFlags), makes the model, runs the Trainer,
// prints the eval table (and the model's samples, the --bench-json line) on rank 0, and maps
// errors to exit codes (0 ok, 2 invalid argument, 3 not found, 4 data loss, 1 other).
//
// Errors found while setting up (flags, data, init, optimizer state, resume) are agreed by all
// ranks, so every rank exits with the same code after a clean MPI shutdown and rank 0 prints the
// message. An error during training may hit one rank only while its peers wait in a collective:
// the library tells the peers (Communicator::AnnounceFailure), whose waits fail naming that rank
// and call; every rank that fails prints its error and calls Communicator::Abort (NCCL:
// ncclCommAbort; MPI: MPI_Abort with the exit code after at most a few seconds for the peers to
// report), never a synchronising shutdown.
#ifndef SHARDEMA_TRAIN_TRAINER_MAIN_H_
#define SHARDEMA_TRAIN_TRAINER_MAIN_H_

#include <functional>
#include <memory>

#include "framework/status.h"
#include "train/model.h"
#include "train/train_config.h"

namespace shardema {

// One training binary: its model's flags, where the trainer's flags go, how to make the model
// once they are parsed, and process-level settings.
struct TrainerBinary {
  ModelFlags flags;
  // The parsed trainer flags (a model may keep them in a struct derived from TrainConfig, which
  // its `flags` and `make_model` read). Must outlive TrainerMain.
  TrainConfig* config = nullptr;
  // Called once after a successful parse.
  std::function<std::unique_ptr<TrainModel>()> make_model;
  // glibc's M_MMAP_THRESHOLD in bytes; 0 keeps glibc's dynamic threshold. A fixed threshold
  // returns large freed blocks to the system (lower peak RSS when a step's big temporaries vary)
  // but page-faults every allocation above it again on every step. Measured: train_mlp (20M
  // params, 4 ranks) peak RSS 245 MiB with 1 MiB vs 277-327 MiB dynamic; train_gpt (the benchmark
  // GPT, 1 rank) 87.6 ms per step with 1 MiB vs 75.6 ms dynamic (3x the page faults).
  int mmap_threshold_bytes = 0;
};

int TrainerMain(int argc, char** argv, const TrainerBinary& binary);

// The TrainerBinary of a model whose config struct (derived from TrainConfig) `config` holds the
// parsed flags, `flags` binds them, and `make` makes the model from them.
template <class Config>
TrainerBinary BinaryOf(Config* config, ModelFlags (*flags)(Config*),
                       std::unique_ptr<TrainModel> (*make)(const Config&)) {
  TrainerBinary b;
  b.flags = flags(config);
  b.config = config;
  b.make_model = [config, make] { return make(*config); };
  return b;
}

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_TRAINER_MAIN_H_
