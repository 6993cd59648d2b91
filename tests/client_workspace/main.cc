// A user's training binary: train_mlp's model (@shardema//examples:mlp_train) under the trainer's
// main (@shardema//train:trainer_main), as examples/train_mlp.cc writes it. From its first line
// that is not a comment, this file is the C++ block of README's "Depending on shardema from
// another Bazel workspace", line for line (run.sh checks it).
#include "examples/mlp_train.h"

int main(int argc, char** argv) {
  shardema::examples::MlpConfig config;
  shardema::TrainerBinary binary = shardema::examples::MlpBinary(&config);
  binary.mmap_threshold_bytes = 1 << 20;  // as train_mlp (examples/train_mlp.cc)
  return shardema::TrainerMain(argc, argv, binary);
}
