// TrainerMain: the main() of train_mlp and train_gpt. `mpirun -np W train_X --help` lists the
// flags; examples/trainer.h describes the loop. It parses (with `parse`), runs the Trainer, prints
// the eval table (and --sample texts, --bench-json line) on rank 0, and maps errors to exit codes
// (0 ok, 2 invalid argument, 3 not found, 4 data loss, 1 other).
//
// Errors found while setting up (flags, data, init, optimizer state, resume) are agreed by all
// ranks, so every rank exits with the same code after a clean MPI shutdown and rank 0 prints the
// message. An error during training may hit one rank only while its peers wait in a collective:
// the library tells the peers (Communicator::AnnounceFailure), whose waits fail naming that rank
// and call; every rank that fails prints its error and calls Communicator::Abort (NCCL:
// ncclCommAbort; MPI: MPI_Abort with the exit code after at most a few seconds for the peers to
// report), never a synchronising shutdown.
#ifndef SHARDEMA_EXAMPLES_TRAINER_MAIN_H_
#define SHARDEMA_EXAMPLES_TRAINER_MAIN_H_

#include "examples/train_config.h"
#include "framework/status.h"

namespace shardema::examples {

// Process-level settings of one trainer binary.
struct TrainerMainOptions {
  // glibc's M_MMAP_THRESHOLD in bytes; 0 keeps glibc's dynamic threshold. A fixed threshold
  // returns large freed blocks to the system (lower peak RSS when a step's big temporaries vary)
  // but page-faults every allocation above it again on every step. Measured: train_mlp (20M
  // params, 4 ranks) peak RSS 245 MiB with 1 MiB vs 277-327 MiB dynamic; train_gpt (the benchmark
  // GPT, 1 rank) 87.6 ms per step with 1 MiB vs 75.6 ms dynamic (3x the page faults).
  int mmap_threshold_bytes = 0;
};

int TrainerMain(int argc, char** argv, const char* program,
                StatusOr<ParsedArgs> (*parse)(int argc, const char* const* argv),
                const TrainerMainOptions& options = {});

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_TRAINER_MAIN_H_
