// Test fixture for ckpt_cli_test.sh: writes a committed checkpoint of the checkpoint tests' model
// (checkpoint/test_util.h: odd unit sizes, slots params/exp_avg/ema_0.999 f32 and ema_bf16 bf16,
// two replicated buffers) at world size WORLD and step STEP into ROOT, with 512-byte checksum
// chunks so that every rank file has several chunks. With BIG, the model gets one more unit of
// BIG elements (TestModelWithBig) and the default chunk size (large checkpoints for kill tests).
//   make_test_checkpoint ROOT WORLD STEP [BIG]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

int main(int argc, char** argv) {
  using namespace shardema;             // NOLINT
  using namespace shardema::ckpt_test;  // NOLINT
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s ROOT WORLD STEP [BIG]\n", argv[0]);
    return 2;
  }
  const int world = std::atoi(argv[2]);
  const int64_t step = std::atoll(argv[3]);
  if (world < 1 || step < 0) {
    std::fprintf(stderr, "make_test_checkpoint: bad WORLD '%s' or STEP '%s'\n", argv[2], argv[3]);
    return 2;
  }
  const int64_t big = argc == 5 ? std::atoll(argv[4]) : 0;
  std::vector<OwnedState> states = MakeStates(
      MakeLayout(big > 0 ? TestModelWithBig(big) : TestModel(), world), DefaultSlots(), step);
  SaveOptions o;
  if (big == 0) o.chunk_bytes = 512;
  o.fsync = false;
  StatusOr<std::string> dir = SaveAllRanks(argv[1], StatesOf(states), o);
  if (!dir.ok()) {
    std::fprintf(stderr, "make_test_checkpoint: %s\n", dir.status().ToString().c_str());
    return ExitCodeFor(dir.status());
  }
  std::printf("%s\n", dir->c_str());
  return 0;
}
