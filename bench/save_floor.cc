// save_floor: the data work of one rank's checkpoint save, alone, on a fixed schedule, so that a
// training run beside it shows what that work costs the training (bench/save_stall_bench.sh's
// "floor" and "copy" modes).
//
//   save_floor --bytes N --dir D --start-unix-ms T0 --period-ms P --passes K [--copy]
//
// Pass k starts at T0 + k*P on the system clock (or as soon as pass k-1 ends, when that is later)
// and writes one rank file of N bytes (one f32 slot, FORMAT.md) through WriteRankFile, the rank
// file writer a save uses (checkpoint/rank_file.h), from page-aligned host memory (a framework
// Buffer, the kind of memory the trainer's shards are):
//   default  the XXH3 chunk checksums and direct writes straight from that memory, then fsync:
//            what ANY save that checksums its file must do, so the least an asynchronous save
//            can cost the training on this machine (no snapshot copy, no collective, no commit);
//   --copy   through a snapshot: the copy into staging memory and the checksums in one pass, the
//            writes from the copy: the data work of train_mlp --async-save's writer thread.
// The file is removed after each pass. Prints one JSON line:
//   {"bytes":N,"copy":false,"passes":[[start_unix_ms,end_unix_ms],...]}
// Errors (allocation, the directory, a write) end it with the message and a non-zero exit.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "checkpoint/format.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/rank_file.h"
#include "framework/device.h"
#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema {
namespace {

double UnixMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Flags {
  std::string bytes = "64M";
  std::string dir = "/tmp";
  double start_unix_ms = 0;
  double period_ms = 500;
  int passes = 1;
  bool copy = false;
};

Status Run(const Flags& f) {
  ASSIGN_OR_RETURN(uint64_t bytes, bench::ParseBytes(f.bytes, "--bytes"));
  if (f.passes < 1 || f.period_ms < 0) {
    return InvalidArgument("--passes must be >= 1 and --period-ms >= 0 (got ", f.passes, ", ",
                           f.period_ms, ")");
  }
  const int64_t numel = int64_t(bytes / 4);
  ASSIGN_OR_RETURN(StoreLayout layout, StoreLayout::Build({{"w", {{"w.weight", {numel}}}}}, 1));
  ASSIGN_OR_RETURN(Manifest plan,
                   Manifest::Plan(1, layout, {SlotEntry{"params", DType::kF32}}, {}, {}));
  const uint64_t slot_bytes = plan.slots[0].bytes_per_rank;
  ASSIGN_OR_RETURN(Buffer data, Buffer::Allocate(slot_bytes, Device::Cpu()));
  for (int64_t i = 0; i < numel; ++i) data.as<float>()[i] = float(i % 1000003) * 1e-3f;
  Buffer stage;
  RankFileSnapshot snapshot;
  if (f.copy) {
    ASSIGN_OR_RETURN(stage, Buffer::Allocate(slot_bytes, Device::Cpu()));
    std::memset(stage.data(), 0, slot_bytes);  // faulted in now, as ReserveStaging does
    snapshot.slots = {stage.as<char>()};
  }
  const std::string path = JoinPath(f.dir, "save_floor_" + std::to_string(getpid()) + ".bin");
  std::vector<std::pair<double, double>> passes;
  for (int k = 0; k < f.passes; ++k) {
    const double due = f.start_unix_ms + k * f.period_ms, wait = due - UnixMs();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait));
    const double t0 = UnixMs();
    RETURN_IF_ERROR(WriteRankFile(path, plan, 0, {data.data()}, {}, RankFileWriteOptions{},
                                  f.copy ? &snapshot : nullptr)
                        .status());
    passes.emplace_back(t0, UnixMs());
    RETURN_IF_ERROR(RemoveTree(path));
  }
  std::printf("{\"bytes\":%llu,\"copy\":%s,\"passes\":[", static_cast<unsigned long long>(bytes),
              f.copy ? "true" : "false");
  for (size_t k = 0; k < passes.size(); ++k) {
    std::printf("%s[%.3f,%.3f]", k ? "," : "", passes[k].first, passes[k].second);
  }
  std::printf("]}\n");
  return Status::Ok();
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  shardema::Flags f;
  CLI::App app{"save_floor: a save's data work alone, on a schedule (see bench/save_stall_bench)"};
  app.add_option("--bytes", f.bytes, "bytes of the rank file's slot (e.g. 84M)");
  app.add_option("--dir", f.dir, "directory for the file (removed after each pass)");
  app.add_option("--start-unix-ms", f.start_unix_ms, "when the first pass starts (system clock)");
  app.add_option("--period-ms", f.period_ms, "time between the passes' starts");
  app.add_option("--passes", f.passes, "number of passes");
  app.add_flag("--copy", f.copy, "through a snapshot copy, as the async writer (default: none)");
  CLI11_PARSE(app, argc, argv);
  return shardema::bench::ExitWith("save_floor", shardema::Run(f));
}
