// ckpt_bench: checkpoint save throughput against a plain sequential write of the same bytes to
// the same disk, the training stall of an asynchronous save against a synchronous one, and the
// peak extra memory of a safetensors export of a model larger than its 64 MiB bound.
//
//   mpirun --oversubscribe --bind-to none -np N bazel-bin/bench/ckpt_bench [--bytes 1G]
//       [--export-bytes 512M] [--dir /tmp] [--reps 3] [--step-ms 50] [--steps-between 5]
//   (plain mpirun, not tests/mpi_run.sh, which turns off OpenMPI's shared-memory single copy;
//   as root add --allow-run-as-root)
//
// State: --bytes over all ranks, as four f32 slots (params, exp_avg, exp_avg_sq, ema) of a
// 64-unit model, sharded over the N ranks (StoreLayout).
// Rows (time = slowest rank, best of --reps, the two alternating in order; GB/s = bytes / time):
//   seqwrite     each rank writes its share to one file in 16 MiB write(2)s, then fsync
//   save_sync    CheckpointWriter::Save (rank files, checksums, fsync, manifest, commit)
//   stall_sync   = save_sync: the training thread is blocked for the whole save
//   stall_async_bg  the extra time the training steps take while an asynchronous save is in
//                flight (SaveOptions::Snapshot::kInBackground, the default: the writer thread
//                copies the snapshot while the step computes; WaitSnapshot() before the simulated
//                optimizer step): a step is a FIXED amount of real CPU work (f32 GEMM loops
//                calibrated to --step-ms, then a 64 KiB all-reduce that couples the ranks like a
//                gradient reduction), so CPU the writer thread takes from the ranks shows; stall =
//                time from SaveAsync to the Poll that committed - (steps in it) x (median step
//                time of the --steps-between plain steps before the save). Best of the second and
//                third asynchronous saves, whose staging memory is already allocated (the first
//                one, which also allocates it, is shown as stall_async_first)
//   stall_async_inplace  the same with SaveOptions::Snapshot::kInPlace: no copy, the writer
//                writes from the state and WaitSnapshot() waits until the rank file is written
//   async_to_commit  wall time from SaveAsync to the Poll that committed (last save)
//   export       ExportSafetensors of a --export-bytes checkpoint (f32 slot, saved at 4 ranks)
//                to bf16, in a fresh child process; extra memory = VmHWM after - VmHWM before
// summary: save_vs_seqwrite = GB/s(save_sync) / GB/s(seqwrite) (goal >= 0.8),
//   async_stall_ratio = stall_async_bg / stall_sync (goal <= 0.05): the mode train_mlp
//   --async-save uses; async_inplace_stall_ratio = stall_async_inplace / stall_sync
//   (--async-snapshot in-place); export_peak_mib = the child's extra peak memory (goal <= 64).
// Files go to a directory under --dir, removed at the end.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "checkpoint/collective_bytes.h"
#include "checkpoint/export.h"
#include "checkpoint/posix_file.h"
#include "checkpoint/writer.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/status.h"

extern char** environ;

namespace shardema {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Peak and current resident memory of this process (KiB), from /proc/self/status.
uint64_t StatusKib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + std::strlen(key), nullptr, 10);
  }
  return 0;
}

// The export child: ckpt_bench --export-child CKPT --export-out FILE --result RESULT
int ExportChild(const std::string& ckpt, const std::string& out, const std::string& result) {
  const uint64_t before = StatusKib("VmHWM:");
  Clock::time_point t = Clock::now();
  StatusOr<ExportReport> r = ExportSafetensors(ckpt, "ema", DType::kBF16, out);
  const double secs = Since(t);
  if (!r.ok()) {
    std::fprintf(stderr, "ckpt_bench export child: %s\n", r.status().ToString().c_str());
    return 1;
  }
  const uint64_t after = StatusKib("VmHWM:");
  std::ofstream f(result);
  f << before << " " << after << " " << secs << " " << r->total_bytes << "\n";
  return f ? 0 : 1;
}

struct Flags {
  std::string bytes = "1G";
  std::string export_bytes = "512M";
  std::string dir = "/tmp";
  int reps = 3;
  int step_ms = 50;
  int steps_between = 10;
  std::string export_child, export_out, result;
};

// The slowest rank's value.
StatusOr<double> MaxOverRanks(Communicator* comm, double v) {
  std::vector<float> all(size_t(comm->world_size()));
  float mine = float(v);
  RETURN_IF_ERROR(comm->AllGather(&mine, all.data(), 1, DType::kF32));
  return double(*std::max_element(all.begin(), all.end()));
}

std::vector<UnitSpec> Model(uint64_t numel) {
  std::vector<UnitSpec> units;
  const int n = 64;
  for (int u = 0; u < n; ++u) {
    const int64_t e = int64_t(numel / n) + (u < int(numel % n) ? 1 : 0);
    units.push_back(
        {"layers." + std::to_string(u), {{"layers." + std::to_string(u) + ".weight", {e}}}});
  }
  return units;
}

struct OwnedSlots {
  CheckpointState state;
  std::vector<std::vector<float>> data;
};

OwnedSlots MakeState(const StoreLayout& layout, int rank, int64_t step) {
  OwnedSlots o;
  o.state.rank = rank;
  o.state.step = step;
  o.state.layout = layout;
  o.state.meta = {{"optimizer", {{"lr", 1e-4}}}, {"ema", {{"ema", {{"decay", 0.9999}}}}}};
  for (const char* name : {"params", "exp_avg", "exp_avg_sq", "ema"}) {
    o.data.emplace_back(size_t(layout.local_numel()));
    std::vector<float>& d = o.data.back();
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = float((i * 2654435761u + size_t(rank)) % 1000003) * 1e-3f;
    o.state.slots.push_back(SlotView{name, DType::kF32, d.data()});
  }
  return o;
}

// Writes `bytes` from `src` (cycled) to `path` in 16 MiB write(2)s, then fsync.
Status SequentialWrite(const std::string& path, const char* src, size_t src_bytes, uint64_t bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, WritableFile::Create(path));
  const size_t io = size_t(16) << 20;
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min<uint64_t>({io, bytes - done, src_bytes - done % src_bytes}));
    RETURN_IF_ERROR(f->Append(src + done % src_bytes, n));
    done += n;
  }
  RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

// A stand-in for a training step that does a FIXED amount of real CPU work, so CPU taken by the
// checkpoint writer thread shows as a longer step: `reps` products of two kGemm x kGemm f32
// matrices (a GEMM-like i-k-j loop over memory), then a 64 KiB sum all-reduce, which couples the
// ranks as a gradient reduction does (a rank slowed by its writer slows every rank).
constexpr size_t kGemm = 128;
struct FakeStep {
  std::vector<float> a, b, c, grad, summed;
  int reps = 1;
  FakeStep() : a(kGemm * kGemm), b(kGemm * kGemm), c(kGemm * kGemm), grad(16384), summed(16384) {
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float(i % 97) * 1e-2f;
      b[i] = float(i % 89) * 1e-2f;
    }
  }
  Status Run(Communicator* comm) {
    for (int r = 0; r < reps; ++r) {
      std::fill(c.begin(), c.end(), 0.f);
      for (size_t i = 0; i < kGemm; ++i) {
        for (size_t k = 0; k < kGemm; ++k) {
          const float aik = a[i * kGemm + k];
          const float* brow = &b[k * kGemm];
          float* crow = &c[i * kGemm];
          for (size_t j = 0; j < kGemm; ++j) crow[j] += aik * brow[j];
        }
      }
      a[(size_t(r) * 31) % a.size()] += c[(size_t(r) * 17) % c.size()] * 1e-9f;  // a dependency
    }
    grad[0] = c[0];
    return comm->AllReduce(grad.data(), summed.data(), grad.size(), DType::kF32);
  }
};

// Sets step->reps so one step takes about `ms` on every rank (rank 0's calibration, broadcast).
Status Calibrate(Communicator* comm, FakeStep* step, int ms) {
  step->reps = 1;
  double per = 1e30;
  for (int i = 0; i < 5; ++i) {
    Clock::time_point t = Clock::now();
    RETURN_IF_ERROR(step->Run(comm));
    per = std::min(per, Since(t));
  }
  float reps = float(std::max(1.0, std::round(double(ms) / 1000.0 / per)));
  RETURN_IF_ERROR(comm->Broadcast(&reps, 1, DType::kF32));
  step->reps = int(reps);
  return Status::Ok();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string what;
  uint64_t bytes;
  double secs;
};

Status Run(const Flags& f) {
  ASSIGN_OR_RETURN(uint64_t total_bytes, bench::ParseBytes(f.bytes, "--bytes"));
  ASSIGN_OR_RETURN(uint64_t export_bytes, bench::ParseBytes(f.export_bytes, "--export-bytes"));
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi, MpiCommunicator::Create());
  Communicator* comm = mpi.get();
  const int rank = comm->rank(), world = comm->world_size();
  std::string mine = rank == 0 ? JoinPath(f.dir, "ckpt_bench_" + std::to_string(getpid())) : "";
  ASSIGN_OR_RETURN(const std::string root, BroadcastBytes(comm, mine, 0));
  if (rank == 0) RETURN_IF_ERROR(MakeDirs(root));
  RETURN_IF_ERROR(comm->Barrier());

  std::vector<Row> rows;
  double seq = 1e30, save = 1e30, stall_async_first = 0, stall_overlap = 0, stall_in_place = 0,
         async_total = 0;
  double step_baseline = 0;
  int gemm_reps = 0;
  int64_t async_steps = 0;
  uint64_t state_bytes = 0;
  {
    ASSIGN_OR_RETURN(StoreLayout layout, StoreLayout::Build(Model(total_bytes / 16), world));
    OwnedSlots st = MakeState(layout, rank, 1);
    const uint64_t local_bytes = uint64_t(layout.local_numel()) * 4 * 4;
    state_bytes = local_bytes * uint64_t(world);
    SaveOptions so;
    CheckpointWriter writer(JoinPath(root, "ckpt"), comm, so);
    int64_t step = 1;
    auto seq_write = [&]() -> Status {
      RETURN_IF_ERROR(comm->Barrier());
      Clock::time_point t = Clock::now();
      const std::string path = JoinPath(root, "seq_" + std::to_string(rank) + ".bin");
      Status s = SequentialWrite(path, reinterpret_cast<const char*>(st.data[0].data()),
                                 st.data[0].size() * 4, local_bytes);
      RETURN_IF_ERROR(AgreeOnStatus(comm, s, "seqwrite"));
      ASSIGN_OR_RETURN(double ts, MaxOverRanks(comm, Since(t)));
      seq = std::min(seq, ts);
      return RemoveTree(path);
    };
    auto sync_save = [&]() -> Status {
      st.state.step = step++;
      RETURN_IF_ERROR(comm->Barrier());
      Clock::time_point t = Clock::now();
      RETURN_IF_ERROR(writer.Save(st.state));
      ASSIGN_OR_RETURN(double tv, MaxOverRanks(comm, Since(t)));
      save = std::min(save, tv);
      return Status::Ok();
    };
    // Alternating order, so neither always follows the other's deletions and write-back.
    for (int rep = 0; rep < f.reps; ++rep) {
      RETURN_IF_ERROR(rep % 2 == 0 ? seq_write() : sync_save());
      RETURN_IF_ERROR(rep % 2 == 0 ? sync_save() : seq_write());
    }
    // Asynchronous saves: how much longer the training steps take while a save is in flight.
    // Before each save --steps-between plain steps give the baseline (their median step time);
    // then SaveAsync and steps (compute, [WaitSnapshot], Poll) until the save is committed:
    // stall = their total time - (number of those steps) x baseline. Returns {first, best of the
    // later ones}, slowest rank.
    FakeStep fake;
    RETURN_IF_ERROR(Calibrate(comm, &fake, f.step_ms));
    gemm_reps = fake.reps;
    auto async_saves = [&](CheckpointWriter& w,
                           bool overlap) -> StatusOr<std::pair<double, double>> {
      std::pair<double, double> out{0, 1e30};
      for (int a = 0; a < 3; ++a) {
        std::vector<double> plain;
        for (int i = 0; i < f.steps_between; ++i) {
          Clock::time_point t = Clock::now();
          RETURN_IF_ERROR(fake.Run(comm));
          plain.push_back(Since(t));
        }
        ASSIGN_OR_RETURN(const double baseline, MaxOverRanks(comm, Median(plain)));
        st.state.step = step++;
        RETURN_IF_ERROR(comm->Barrier());
        Clock::time_point start = Clock::now();
        RETURN_IF_ERROR(w.SaveAsync(st.state));
        int64_t steps = 0;
        for (bool done = false; !done; ++steps) {
          RETURN_IF_ERROR(fake.Run(comm));  // forward/backward: the state is not modified
          if (overlap) w.WaitSnapshot();    // before the optimizer step modifies the state
          ASSIGN_OR_RETURN(done, w.Poll());
        }
        const double total = Since(start);
        ASSIGN_OR_RETURN(double tb,
                         MaxOverRanks(comm, std::max(0.0, total - double(steps) * baseline)));
        if (a == 0) {
          out.first = tb;
        } else {
          out.second = std::min(out.second, tb);
        }
        ASSIGN_OR_RETURN(async_total, MaxOverRanks(comm, total));
        async_steps = steps;
        step_baseline = baseline;
      }
      return out;
    };
    // The default writer (SaveOptions::Snapshot::kInBackground), then one writing in place.
    ASSIGN_OR_RETURN(auto background, async_saves(writer, true));
    stall_async_first = background.first;
    stall_overlap = background.second;
    RETURN_IF_ERROR(writer.Finish());
    SaveOptions in_place;
    in_place.snapshot = SaveOptions::Snapshot::kInPlace;
    CheckpointWriter w(JoinPath(root, "ckpt_in_place"), comm, in_place);
    ASSIGN_OR_RETURN(auto stalls, async_saves(w, true));
    RETURN_IF_ERROR(w.Finish());
    stall_in_place = stalls.second;
  }
  rows.push_back({"seqwrite", state_bytes, seq});
  rows.push_back({"save_sync", state_bytes, save});
  rows.push_back({"stall_sync", state_bytes, save});
  rows.push_back({"stall_async_first", state_bytes, stall_async_first});
  rows.push_back({"stall_async_bg", state_bytes, stall_overlap});
  rows.push_back({"stall_async_inplace", state_bytes, stall_in_place});
  rows.push_back({"async_to_commit", state_bytes, async_total});

  // Export of a model larger than the 64 MiB bound, in a fresh child process (rank 0).
  double export_peak_mib = -1, export_secs = 0;
  uint64_t exported = 0;
  if (rank == 0) {
    const std::string ckpt = JoinPath(root, "export_ckpt");
    {
      ASSIGN_OR_RETURN(StoreLayout l4, StoreLayout::Build(Model(export_bytes / 4), 4));
      std::vector<std::vector<float>> data(4);
      std::vector<CheckpointState> states(4);
      for (int r = 0; r < 4; ++r) {
        data[size_t(r)].assign(size_t(l4.local_numel()), 0.5f + float(r));
        states[size_t(r)] = CheckpointState{
            7, r, l4, {SlotView{"ema", DType::kF32, data[size_t(r)].data()}}, {}, {}};
      }
      RETURN_IF_ERROR(SaveAllRanks(ckpt, states).status());
    }
    const std::string out = JoinPath(root, "model.safetensors"),
                      result = JoinPath(root, "export_result.txt");
    std::vector<std::string> args = {
        "/proc/self/exe", "--export-child", ckpt, "--export-out", out, "--result", result};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      return Internal("posix_spawn of the export child failed");
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return Internal("the export child failed (status ", status, ")");
    std::ifstream in(result);
    uint64_t before = 0, after = 0;
    in >> before >> after >> export_secs >> exported;
    export_peak_mib = double(after - before) / 1024.0;
  }

  if (rank == 0) {
    std::printf(
        "# ckpt_bench: %d ranks, state %.1f MiB (4 f32 slots, 64 units), dir %s, best of %d reps\n",
        world, double(state_bytes) / 1048576.0, f.dir.c_str(), f.reps);
    std::printf(
        "# time = slowest rank; GB/s = bytes / time; stall = extra step time while saving\n");
    std::printf("# fake step: %d GEMM reps, baseline %.1f ms; last async save spanned %lld steps\n",
                gemm_reps, step_baseline * 1e3, static_cast<long long>(async_steps));
    std::printf("# %-20s %12s %10s %9s\n", "what", "bytes", "time_s", "GB/s");
    for (const Row& r : rows) {
      std::printf("  %-20s %12llu %10.4f %9.3f\n", r.what.c_str(),
                  static_cast<unsigned long long>(r.bytes), r.secs,
                  r.secs > 0 ? double(r.bytes) / r.secs / 1e9 : 0.0);
    }
    std::printf("  %-20s %12llu %10.4f %9.3f   extra peak memory %.1f MiB (bound 64)\n",
                "export_bf16", static_cast<unsigned long long>(exported), export_secs,
                export_secs > 0 ? double(exported) / export_secs / 1e9 : 0.0, export_peak_mib);
    std::printf(
        "summary: save_vs_seqwrite=%.3f async_stall_ratio=%.4f async_inplace_stall_ratio=%.4f "
        "export_peak_mib=%.1f\n",
        seq / save, stall_overlap / save, stall_in_place / save, export_peak_mib);
  }
  RETURN_IF_ERROR(comm->Barrier());
  if (rank == 0) RETURN_IF_ERROR(RemoveTree(root));
  return MpiCommunicator::FinalizeMpi();
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) {
  shardema::Flags f;
  CLI::App app{"ckpt_bench: checkpoint save vs sequential write, async stall, export memory"};
  app.add_option("--bytes", f.bytes, "sharded state size over all ranks (e.g. 1G, 256M)");
  app.add_option("--export-bytes", f.export_bytes, "size of the exported model (f32, e.g. 512M)");
  app.add_option("--dir", f.dir, "directory for the files (a temporary directory is made in it)");
  app.add_option("--reps", f.reps, "repetitions of seqwrite/save (best is reported)");
  app.add_option("--step-ms", f.step_ms, "compute time of one simulated training step");
  app.add_option("--steps-between", f.steps_between,
                 "training steps between two asynchronous saves");
  app.add_option("--export-child", f.export_child,
                 "internal: run the export measurement on this checkpoint");
  app.add_option("--export-out", f.export_out, "internal");
  app.add_option("--result", f.result, "internal");
  CLI11_PARSE(app, argc, argv);
  if (!f.export_child.empty()) return shardema::ExportChild(f.export_child, f.export_out, f.result);
  return shardema::bench::ExitWith("ckpt_bench", shardema::Run(f));
}
