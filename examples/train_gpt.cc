// train_gpt: a nanoGPT-shaped transformer on the sharded store (examples/gpt_model.h for the
// model, examples/gpt_data.h for the data, examples/trainer.h for the loop).
#include "examples/trainer_main.h"

int main(int argc, char** argv) {
  return shardema::examples::TrainerMain(argc, argv, "train_gpt",
                                         shardema::examples::ParseGptConfig);
}
