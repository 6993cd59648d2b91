// train_gpt: a nanoGPT-shaped transformer on the sharded store (examples/gpt_train.h for the
// model and its data, train/trainer.h for the loop).
#include "examples/gpt_train.h"

int main(int argc, char** argv) {
  shardema::examples::GptConfig config;
  return shardema::TrainerMain(argc, argv, shardema::examples::GptBinary(&config));
}
