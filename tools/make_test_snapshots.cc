// Test fixture for ckpt_posthoc_test.sh: synthetic EMA snapshots (ema/snapshot_test_util.h) of
// the checkpoint tests' model in ROOT/ema_snapshots, one per STEP:WORLD argument (so one root can
// hold snapshots of several world sizes, like a run resumed at another world size).
// With BIG=N in the environment the model gets a unit "big" of N extra elements
// (ckpt_test::TestModelWithBig), for memory measurements.
//   make_test_snapshots ROOT STEP:WORLD [STEP:WORLD ...]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checkpoint/test_util.h"
#include "ema/snapshot_test_util.h"

int main(int argc, char** argv) {
  using namespace shardema;  // NOLINT
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s ROOT STEP:WORLD [STEP:WORLD ...]\n", argv[0]);
    return 2;
  }
  const char* big = std::getenv("BIG");
  const std::vector<UnitSpec> model =
      big != nullptr ? ckpt_test::TestModelWithBig(std::atoll(big)) : ckpt_test::TestModel();
  for (int i = 2; i < argc; ++i) {
    long long step = 0;
    int world = 0;
    if (std::sscanf(argv[i], "%lld:%d", &step, &world) != 2 || step < 1 || world < 1) {
      std::fprintf(stderr, "make_test_snapshots: bad STEP:WORLD '%s'\n", argv[i]);
      return 2;
    }
    Status s = ema_test::WriteSyntheticSnapshot(argv[1], step, world, 0, model);
    if (!s.ok()) {
      std::fprintf(stderr, "make_test_snapshots: %s\n", s.ToString().c_str());
      return ExitCodeFor(s);
    }
  }
  return 0;
}
