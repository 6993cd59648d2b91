// checksum_bench: what a checkpoint's checksum and snapshot cost per byte, on one core.
//
//   bazel-bin/bench/checksum_bench [--bytes 84M] [--repeats 7]
//
// Over one --bytes buffer (the size of one rank's state in a save), for each XXH3 variant the CPU
// runs (framework/cpu_isa.h: v2 SSE2, v3 AVX2, v4 AVX-512) and the variant in use:
//   hash          ChunkedHash::Update over the buffer (a synchronous save's checksum pass)
//   copy+hash     memcpy into a staging buffer, then the hash over it (the two passes an
//                 asynchronous save made before CopyAndUpdate)
//   copy_and_hash ChunkedHash::CopyAndUpdate (one pass: the snapshot and its checksum)
// and the reference:
//   memcpy        the C library's copy of the same bytes (what any snapshot costs at least).
// GB/s = bytes / median time (bytes counted once, as the file's bytes).
// Last line: summary: copy_and_hash_vs_memcpy=<memcpy time / copy_and_hash time, path in use>
//   copy_and_hash_vs_two_pass=<copy+hash time (v2, the old path) / copy_and_hash time (in use)>
//   hash_gbps=<in use> hash_sse2_gbps=<v2> ... isa=<in use: v2, v3 or v4>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "checkpoint/checksum.h"
#include "checkpoint/format.h"
#include "framework/cpu_isa.h"

namespace shardema {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

double MedianMs(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {  // one warm-up
    const auto a = std::chrono::steady_clock::now();
    fn();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    if (r > 0) t.push_back(ms);
  }
  return bench::Median(t);
}

int Run(int argc, char** argv) {
  std::string bytes_flag = "84M";
  int repeats = 7;
  CLI::App app{"checksum_bench"};
  app.add_option("--bytes", bytes_flag, "bytes hashed and copied per pass");
  app.add_option("--repeats", repeats, "timed repetitions (median)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  StatusOr<uint64_t> parsed = bench::ParseBytes(bytes_flag, "--bytes");
  if (!parsed.ok()) return bench::ExitWith("checksum_bench", parsed.status());
  const size_t n = size_t(*parsed);
  const size_t alloc = (n + 4095) / 4096 * 4096;
  std::unique_ptr<char, FreeDeleter> src(static_cast<char*>(std::aligned_alloc(4096, alloc)));
  std::unique_ptr<char, FreeDeleter> dst(static_cast<char*>(std::aligned_alloc(4096, alloc)));
  if (src == nullptr || dst == nullptr) {
    return bench::ExitWith("checksum_bench",
                           ResourceExhausted("cannot allocate 2 x ", n, " bytes"));
  }
  for (size_t i = 0; i < n; ++i) src.get()[i] = char(i * 2654435761u >> 13);
  std::memset(dst.get(), 0, n);
  const uint64_t chunk = kDefaultChunkBytes;
  uint64_t sink = 0;
  auto hash = [&] {
    ChunkedHash h(chunk);
    h.Update(src.get(), n);
    h.Finish();
    sink ^= h.whole();
  };
  auto two_pass = [&] {
    std::memcpy(dst.get(), src.get(), n);
    ChunkedHash h(chunk);
    h.Update(dst.get(), n);
    h.Finish();
    sink ^= h.whole();
  };
  auto one_pass = [&] {
    ChunkedHash h(chunk);
    h.CopyAndUpdate(src.get(), dst.get(), n);
    h.Finish();
    sink ^= h.whole();
  };
  const double memcpy_ms = MedianMs(repeats, [&] { std::memcpy(dst.get(), src.get(), n); });
  auto gbps = [&](double ms) { return ms > 0 ? double(n) / ms / 1e6 : 0.0; };
  std::printf("# checksum_bench: %zu bytes, chunk %llu bytes, %d repeats (median), one core\n", n,
              (unsigned long long)chunk, repeats);
  std::printf("%8s %14s %10s %10s %8s\n", "isa", "pass", "time_ms", "GB/s", "#wrong");
  std::printf("%8s %14s %10.3f %10.2f %8d\n", "-", "memcpy", memcpy_ms, gbps(memcpy_ms), 0);
  double sse2_two = 0, sse2_hash = 0, use_hash = 0, use_two = 0, use_one = 0;
  const CpuIsa in_use = ActiveCpuIsa();
  for (CpuIsa isa : SupportedCpuIsas()) {
    if (!SetCpuIsa(isa).ok()) return 1;
    const double h = MedianMs(repeats, hash), t = MedianMs(repeats, two_pass),
                 o = MedianMs(repeats, one_pass);
    const int wrong = std::memcmp(dst.get(), src.get(), n) != 0;  // the copy is exact
    const char* name = CpuIsaName(isa);
    std::printf("%8s %14s %10.3f %10.2f %8d\n", name, "hash", h, gbps(h), 0);
    std::printf("%8s %14s %10.3f %10.2f %8d\n", name, "copy+hash", t, gbps(t), 0);
    std::printf("%8s %14s %10.3f %10.2f %8d\n", name, "copy_and_hash", o, gbps(o), wrong);
    if (isa == CpuIsa::kV2) sse2_two = t, sse2_hash = h;
    if (isa == in_use) use_hash = h, use_two = t, use_one = o;
  }
  if (!SetCpuIsa(in_use).ok()) return 1;
  (void)use_two;
  std::printf(
      "summary: copy_and_hash_vs_memcpy=%.3f copy_and_hash_vs_two_pass=%.3f hash_gbps=%.2f "
      "hash_sse2_gbps=%.2f memcpy_gbps=%.2f isa=%s sink=%llx\n",
      use_one > 0 ? memcpy_ms / use_one : 0.0, use_one > 0 ? sse2_two / use_one : 0.0,
      gbps(use_hash), gbps(sse2_hash), gbps(memcpy_ms), CpuIsaName(in_use),
      (unsigned long long)(sink & 0xff));
  return 0;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Run(argc, argv); }
