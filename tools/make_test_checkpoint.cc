// Test fixture for ckpt_cli_test.sh: writes a committed checkpoint of the checkpoint tests' model
// (checkpoint/test_util.h: odd unit sizes, slots params/exp_avg/ema_0.999 f32 and ema_bf16 bf16,
// two replicated buffers) at world size WORLD and step STEP into ROOT, with 512-byte checksum
// chunks so that every rank file has several chunks. With BIG, the model gets one more unit of
// BIG elements (TestModelWithBig) and the default chunk size (large checkpoints for kill tests).
// With --not-started SLOT START (anywhere on the line), the meta lists SLOT as an EMA slot that
// never started, with start_step START (MarkEmaNotStarted; storage bf16 for the bf16 slot).
//   make_test_checkpoint ROOT WORLD STEP [BIG] [--not-started SLOT START]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

int main(int argc, char** argv) {
  using namespace shardema;             // NOLINT
  using namespace shardema::ckpt_test;  // NOLINT
  std::string not_started;
  int64_t not_started_at = 0;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--not-started") == 0 && i + 2 < argc) {
      not_started = argv[i + 1];
      not_started_at = std::atoll(argv[i + 2]);
      i += 2;
    } else {
      args.push_back(argv[i]);
    }
  }
  argc = int(args.size());
  argv = args.data();
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s ROOT WORLD STEP [BIG] [--not-started SLOT START]\n", argv[0]);
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
  if (!not_started.empty()) {
    std::string storage;
    for (const SlotSpec& s : DefaultSlots()) {
      if (s.name == not_started && s.dtype == DType::kBF16) storage = "bf16";
    }
    for (OwnedState& st : states)
      MarkEmaNotStarted(st.state.meta, not_started, not_started_at, storage);
  }
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
