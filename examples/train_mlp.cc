// train_mlp: the reference training binary (examples/mlp_train.h: the model; train/trainer.h: the
// loop).
#include "examples/mlp_train.h"

int main(int argc, char** argv) {
  shardema::examples::MlpConfig config;
  shardema::TrainerBinary binary = shardema::examples::MlpBinary(&config);
  // Blocks of 1 MiB and more get their own mappings, returned to the system when freed. With
  // glibc's dynamic threshold (it grows up to 32 MiB with the largest block freed) the
  // collectives' per-call temporaries, the init/data temporaries and the eval buffers come from
  // the heap and leave resident holes: at 4 ranks of a 20M-parameter MLP peak RSS grew step after
  // step by ~45 MiB per rank (the price: the ring reduce-scatter's temporaries are page-faulted
  // each step, ~5% CPU at 4 ranks).
  binary.mmap_threshold_bytes = 1 << 20;
  return shardema::TrainerMain(argc, argv, binary);
}
