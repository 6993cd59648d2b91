// train_mlp's model for the trainer (train/model.h): the MLP's flags, its data (examples/dataset.h)
// and its compute (MlpModel on the CPU, MlpModelCuda on a GPU), as a TrainModel.
//
// Flags (beside the trainer's, train/train_config.h): --layers D0,...,DL (required), --activation
// relu|gelu, --loss mse|cross_entropy, --data / --eval-data (safetensors x, y),
// --allow-nonfinite-data,
// --synthetic-rows (the synthetic teacher task without --data).
// Checkpoint config compared on resume: layers, activation, loss, data, synthetic_rows (with the
// trainer's init, seed, batch, grad_accum, precision).
// Threading: one thread (the trainer's).
#ifndef SHARDEMA_EXAMPLES_MLP_TRAIN_H_
#define SHARDEMA_EXAMPLES_MLP_TRAIN_H_

#include <memory>
#include <string>
#include <vector>

#include "examples/dataset.h"
#include "examples/mlp_math.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "train/model.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/trainer_main.h"

namespace shardema::examples {

struct MlpConfig : TrainConfig {
  std::vector<int64_t> layers;  // D0, D1, ..., DL (at least two, all > 0)
  mlp::Activation activation = mlp::Activation::kRelu;
  mlp::Loss loss = mlp::Loss::kMse;
  std::string data;                   // --data: x [N, D0] and y; empty = synthetic teacher task
  std::string eval_data;              // --eval-data: empty = all rows of the training data
  bool allow_nonfinite_data = false;  // --allow-nonfinite-data: skip rows with NaN/Inf
  int64_t synthetic_rows = 1024;      // rows of the synthetic task
};

using ParsedMlpArgs = ParsedConfig<MlpConfig>;

// The MLP's flags, bound to `config` (which must outlive the parse).
ModelFlags MlpFlags(MlpConfig* config);
// Parses train_mlp's arguments (without the program name). Errors: kInvalidArgument naming the
// flag.
StatusOr<ParsedMlpArgs> ParseMlpConfig(const std::vector<std::string>& args);

// The MLP as a TrainModel.
std::unique_ptr<TrainModel> MakeMlpModel(const MlpConfig& config);
// Trainer::Create with the MLP (collective; see train/trainer.h).
StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const MlpConfig& config, Communicator* comm,
                                                 Communicator* device_comm = nullptr);
// train_mlp's main: its flags, its model, and the mmap threshold of train_mlp.cc.
TrainerBinary MlpBinary(MlpConfig* config);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_MLP_TRAIN_H_
