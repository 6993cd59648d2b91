// train_gpt's model for the trainer (train/model.h): the GPT's flags, its token data
// (examples/gpt_data.h) and its compute (GptModel on the CPU, GptModelCuda on a GPU), as a
// TrainModel with nanoGPT's weight-decay groups, the tied lm_head and a sampling hook.
//
// Flags (beside the trainer's, train/train_config.h, whose defaults it sets to nanoGPT's:
// --weight-decay 0.1, --betas 0.9,0.95, --clip-norm 1): --n-layer, --n-head, --n-embd,
// --block-size, --data (required) / --eval-data, --data-order shuffled|sequential, --sample N,
// --temperature, --recompute, --attention.
// Checkpoint config compared on resume: model "gpt", n_layer, n_head, n_embd, block_size, data,
// data_order (with the trainer's init, seed, batch, grad_accum, precision).
// Threading: one thread (the trainer's).
#ifndef SHARDEMA_EXAMPLES_GPT_TRAIN_H_
#define SHARDEMA_EXAMPLES_GPT_TRAIN_H_

#include <memory>
#include <string>
#include <vector>

#include "examples/gpt_data.h"
#include "examples/gpt_model.h"
#include "framework/communicator.h"
#include "framework/status.h"
#include "nn/cuda/attention.h"
#include "train/model.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/trainer_main.h"

namespace shardema::examples {

struct GptConfig : TrainConfig {
  GptConfig();  // nanoGPT's defaults of the trainer's flags (above)
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
  int64_t vocab_size = 256;  // --vocab-size V (padded to a multiple of 64: GptShape)
  std::string data;          // --data (required): a text file (bytes are tokens) or .safetensors
  std::string eval_data;     // --eval-data: empty = the training tokens
  DataOrder data_order = DataOrder::kShuffled;
  int64_t sample = 0;        // --sample N: bytes generated at the end from live and EMA weights
  double temperature = 1.0;  // sampling temperature (0: argmax)
  bool recompute = false;    // --recompute: activation recomputation per block
  // --attention auto|cudnn|own: the GPU attention's implementation (nn/cuda/attention.h)
  nn::AttentionBackend attention = nn::AttentionBackend::kAuto;
  GptShape Shape() const;
};

using ParsedGptArgs = ParsedConfig<GptConfig>;

// The GPT's flags, bound to `config` (which must outlive the parse).
ModelFlags GptFlags(GptConfig* config);
// Parses train_gpt's arguments (without the program name). Errors: kInvalidArgument naming the
// flag.
StatusOr<ParsedGptArgs> ParseGptConfig(const std::vector<std::string>& args);

std::unique_ptr<TrainModel> MakeGptModel(const GptConfig& config);
StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const GptConfig& config, Communicator* comm,
                                                 Communicator* device_comm = nullptr);
TrainerBinary GptBinary(GptConfig* config);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_GPT_TRAIN_H_
