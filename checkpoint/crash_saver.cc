// Helper of crash_test: saves a checkpoint every step, forever, until it is killed.
//   crash_saver ROOT sync|async
// sync:  SaveAllRanks of a 2-rank state (two rank files per checkpoint) each step.
// async: CheckpointWriter (single process) SaveAsync each step (commits the previous one).
// Resumes from ROOT's latest checkpoint + 1, so a restarted saver meets the leftovers of the
// killed one. Slot data is the test formula of the step (checkpoint/test_util.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "checkpoint/directory.h"
#include "checkpoint/test_util.h"
#include "checkpoint/writer.h"

namespace shardema {
namespace {

using namespace ckpt_test;  // NOLINT

int Run(const std::string& root, bool async) {
  int64_t step = 1;
  if (StatusOr<std::string> dir = ResolveCheckpointDir(root); dir.ok()) {
    StatusOr<Manifest> m = ReadManifest(*dir);
    if (!m.ok()) {
      std::fprintf(stderr, "crash_saver: %s\n", m.status().ToString().c_str());
      return 1;
    }
    step = m->step + 1;
  }
  const auto model = TestModelWithBig(150000);
  CheckpointWriter writer(root, nullptr, SaveOptions{3, 64 << 10});
  for (;; ++step) {
    std::vector<OwnedState> st = MakeStates(MakeLayout(model, async ? 1 : 2), DefaultSlots(), step);
    Status s = async ? writer.SaveAsync(st[0].state)
                     : SaveAllRanks(root, StatesOf(st), SaveOptions{3, 64 << 10}).status();
    if (async) writer.WaitSnapshot();  // before this step's state goes
    if (!s.ok()) {
      std::fprintf(stderr, "crash_saver: step %lld: %s\n", static_cast<long long>(step),
                   s.ToString().c_str());
      return 1;
    }
  }
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "sync") != 0 && std::strcmp(argv[2], "async") != 0)) {
    std::fprintf(stderr, "usage: %s ROOT sync|async\n", argv[0]);
    return 2;
  }
  return shardema::Run(argv[1], std::strcmp(argv[2], "async") == 0);
}
