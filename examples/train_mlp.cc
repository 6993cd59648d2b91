// train_mlp: the reference training binary (examples/trainer_main.h, examples/trainer.h).
#include "examples/trainer_main.h"

int main(int argc, char** argv) {
  // Blocks of 1 MiB and more get their own mappings, returned to the system when freed. With
  // glibc's dynamic threshold (it grows up to 32 MiB with the largest block freed) the
  // collectives' per-call temporaries, the init/data temporaries and the eval buffers come from
  // the heap and leave resident holes: at 4 ranks of a 20M-parameter MLP peak RSS grew step after
  // step by ~45 MiB per rank (the price: the ring reduce-scatter's temporaries are page-faulted
  // each step, ~5% CPU at 4 ranks).
  shardema::examples::TrainerMainOptions options;
  options.mmap_threshold_bytes = 1 << 20;
  return shardema::examples::TrainerMain(argc, argv, "train_mlp",
                                         shardema::examples::ParseTrainConfig, options);
}
