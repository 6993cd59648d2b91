// train_mlp: the reference training binary (examples/trainer_main.h, examples/trainer.h).
#include "examples/trainer_main.h"

int main(int argc, char** argv) {
  return shardema::examples::TrainerMain(argc, argv, "train_mlp",
                                         shardema::examples::ParseTrainConfig);
}
