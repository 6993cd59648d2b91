// optimizer_bench: memory bandwidth of the fused AdamW + EMA pass on one shard (single process).
//
// Variants, all on a --numel element f32 shard (default 64M) with --threads threads:
//   fused adamw (+k ema, +bf16 copy)  FusedStepCpu, one pass
//   adamw, then ema pass               FusedStepCpu without EMA, then EmaUpdateCpu (unfused)
//   per-tensor passes                  the common framework pattern: --tensors small tensors of
//                                      the same total size; per tensor, the AdamW step as
//                                      separate single-op loops (mul, mul, add, mul, addcmul,
//                                      sqrt, div, add, addcdiv) then the EMA lerp; threads take
//                                      whole tensors
//   triad                              a[i] = b[i] + s*c[i] over as many elements as moves the
//                                      same bytes as fused adamw+1 ema (STREAM triad), with
//                                      ordinary and with non-temporal stores; the faster one is
//                                      the reference in the summary
// bytes/elem counts reads + writes of each array by each pass (fused AdamW: grad r, master rw,
// m rw, v rw = 28; +8 per EMA slot; +2 for a bf16 copy); GB/s = bytes / median time.
//
// Last line: summary: fused_vs_triad=<GB/s fused adamw+1 ema / GB/s triad>
//   fused_vs_separate=<time adamw-then-ema / time fused adamw+1 ema>
//   ema_slot_bytes=<(time fused+1 ema - time fused) at fused+1 bandwidth, in bytes/elem>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>

#include <CLI/CLI.hpp>

#include "bench/adamw_bench_step.h"
#include "bench/bench_util.h"
#include "bench/unfused_ops.h"
#include "optim/fused_step.h"

namespace shardema {
namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

// Runs fn(begin, end) on `threads` disjoint, 64-byte aligned ranges of [0, n).
void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (threads <= 1 || n < 1024) {
    fn(0, n);
    return;
  }
  int64_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
  std::vector<std::thread> workers;
  int64_t begin = 0;
  for (int t = 0; t < threads - 1 && begin + chunk < n; ++t, begin += chunk) {
    workers.emplace_back(fn, begin, begin + chunk);
  }
  fn(begin, n);
  for (auto& w : workers) w.join();
}

// Allocates n floats (64-byte aligned) and first-touches them from the threads that use them.
Buffer Alloc(int64_t n, int threads, float value) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) {
    std::fprintf(stderr, "optimizer_bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  ParallelFor(n, threads, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = value * (1.f + 0.25f * static_cast<float>(i % 7));
  });
  return Buffer(p);
}

// ---- Unfused baselines (bench/unfused_ops.h), in the CPU variant the fused step runs. ----

#define UNFUSED(fn) [](auto... args) { SHARDEMA_ISA_DISPATCH(unfused, fn, args...); }
const auto Scale = UNFUSED(Scale);
const auto Axpy = UNFUSED(Axpy);
const auto AddCMul = UNFUSED(AddCMul);
const auto Sqrt = UNFUSED(Sqrt);
const auto DivScalar = UNFUSED(DivScalar);
const auto AddScalar = UNFUSED(AddScalar);
const auto AddCDiv = UNFUSED(AddCDiv);
const auto Lerp = UNFUSED(Lerp);
const auto Triad = UNFUSED(Triad);
#undef UNFUSED

// STREAM triad with non-temporal stores: `a` is not read for ownership, so the counted bytes are
// the bytes moved. `a` must be 16-byte aligned.
__attribute__((noinline)) void TriadNt(float* __restrict a, const float* __restrict b,
                                       const float* __restrict c, int64_t n, float s) {
  const __m128 vs = _mm_set1_ps(s);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_stream_ps(a + i, _mm_add_ps(_mm_loadu_ps(b + i), _mm_mul_ps(vs, _mm_loadu_ps(c + i))));
  }
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}
// Bytes per element moved by the per-tensor passes below (r + w of each array per pass).
constexpr int kPerTensorBytes = 8 + 8 + 12 + 8 + 12 + 8 + 8 + 8 + 16 + 12;

struct Shard {
  int64_t n;
  Buffer grad, master, m, v, e0, e1;
  std::vector<uint16_t> bf16;
};

// One benchmarked variant: `fn` runs it once over the whole shard.
struct Variant {
  std::string name;
  double bytes_per_elem;
  int64_t elems;
  std::function<void()> fn;
  std::vector<double> ms;  // one time per round
  double Median() const { return bench::Median(ms); }
  double GBps() const { return bytes_per_elem * static_cast<double>(elems) / (Median() * 1e6); }
};

// Warms every variant up once (page faults, caches, threads), then times them round-robin for
// `iters` rounds, so background load is spread evenly over the variants.
void TimeRoundRobin(std::vector<Variant>& variants, int iters) {
  for (Variant& v : variants) v.fn();
  for (int i = 0; i < iters; ++i) {
    for (Variant& v : variants) {
      const auto t0 = std::chrono::steady_clock::now();
      v.fn();
      const auto t1 = std::chrono::steady_clock::now();
      v.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"Fused AdamW + EMA kernel bandwidth vs unfused passes and a STREAM triad"};
  int64_t numel = int64_t{64} << 20;
  int iters = 7, threads = 0, tensors = 1000;
  app.add_option("--numel", numel, "elements in the shard")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed iterations per variant (median)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads (0 = one per hardware thread)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tensors", tensors, "tensors in the per-tensor baseline")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const int64_t n = numel;
  Shard s{n,
          Alloc(n, threads, 1e-3f),
          Alloc(n, threads, 0.5f),
          Alloc(n, threads, 1e-4f),
          Alloc(n, threads, 1e-6f),
          Alloc(n, threads, 0.5f),
          Alloc(n, threads, 0.5f),
          std::vector<uint16_t>(static_cast<size_t>(n))};
  int64_t step = 0;
  const bench::AdamWBenchStep adamw(n, s.grad.get(), s.master.get(), s.m.get(), s.v.get(),
                                    s.e0.get(), s.e1.get(), s.bf16.data());
  auto fused = [&](int num_emas, bool bf16, int nthreads) {
    FusedStepArgs a = adamw.Args(num_emas, bf16, ++step);
    a.num_threads = nthreads;
    FusedStepCpu(a);
  };
  // AdamW + one EMA slot (beta 0.999) of a 2-byte storage, kept in the bf16 array (no compute
  // copy in these variants).
  auto fused_storage = [&](EmaStorage storage) {
    ++step;
    const EmaTarget t{s.bf16.data(), 0.999, storage, SrKey(0, 1, uint64_t(step))};
    FusedStepArgs a = adamw.Args(0, false, step);
    a.emas = &t;
    a.num_emas = 1;
    a.num_threads = threads;
    FusedStepCpu(a);
  };

  std::printf(
      "# optimizer_bench: numel %lld (%.1f MiB per f32 array), threads %d, iters %d "
      "(median, variants timed round-robin), per-tensor baseline %d tensors\n",
      static_cast<long long>(n), n * 4.0 / (1 << 20), threads, iters, tensors);

  std::vector<Variant> variants;
  // Returns the variant's index (the vector may reallocate while variants are added).
  auto add = [&](const std::string& name, double bytes, int64_t elems, std::function<void()> fn) {
    variants.push_back({name, bytes, elems, std::move(fn), {}});
    return variants.size() - 1;
  };

  const size_t f0 = add("fused adamw", 28, n, [&] { fused(0, false, threads); });
  const size_t f1 = add("fused adamw+1 ema", 36, n, [&] { fused(1, false, threads); });
  add("fused adamw+2 ema", 44, n, [&] { fused(2, false, threads); });
  add("fused adamw+1 ema+bf16 copy", 38, n, [&] { fused(1, true, threads); });
  // 2-byte EMA storages: 28 + 2 read + 2 written per element.
  const size_t st_bf16 =
      add("fused adamw+1 ema bf16", 32, n, [&] { fused_storage(EmaStorage::kBF16); });
  const size_t st_sr =
      add("fused adamw+1 ema bf16_sr", 32, n, [&] { fused_storage(EmaStorage::kBF16Sr); });
  const size_t st_delta =
      add("fused adamw+1 ema delta_bf16", 32, n, [&] { fused_storage(EmaStorage::kDeltaBF16); });
  const size_t st_delta_sr = add("fused adamw+1 ema delta_bf16_sr", 32, n,
                                 [&] { fused_storage(EmaStorage::kDeltaBF16Sr); });
  const size_t sep = add("adamw, then ema pass", 28 + 12, n, [&] {
    fused(0, false, threads);
    ParallelFor(n, threads, [&](int64_t b, int64_t e) {
      EmaUpdateCpu(s.e0.get() + b, s.master.get() + b, e - b, 0.999);
    });
  });

  // Per-tensor passes over `tensors` tensors of (about) equal size.
  std::vector<int64_t> bounds(static_cast<size_t>(tensors) + 1);
  for (int t = 0; t <= tensors; ++t) bounds[t] = n * t / tensors;
  const int64_t max_len = n / tensors + 1;
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads),
                                          std::vector<float>(static_cast<size_t>(max_len)));
  add("per-tensor passes (+1 ema)", kPerTensorBytes, n, [&] {
    ++step;
    const float decay = 1.f - 1e-4f * 0.01f, b1 = 0.9f, b2 = 0.999f;
    const float bc1 = 1.f - std::pow(b1, float(step)), bc2 = 1.f - std::pow(b2, float(step));
    std::vector<std::thread> workers;
    auto worker = [&](int w) {
      float* denom = scratch[w].data();
      for (int t = w; t < tensors; t += threads) {
        const int64_t b = bounds[t], len = bounds[t + 1] - bounds[t];
        float *p = s.master.get() + b, *m = s.m.get() + b, *v = s.v.get() + b;
        const float* g = s.grad.get() + b;
        Scale(p, len, decay);
        Scale(m, len, b1);
        Axpy(m, g, len, 1 - b1);
        Scale(v, len, b2);
        AddCMul(v, g, len, 1 - b2);
        Sqrt(denom, v, len);
        DivScalar(denom, len, std::sqrt(bc2));
        AddScalar(denom, len, 1e-8f);
        AddCDiv(p, m, denom, len, -1e-4f / bc1);
        Lerp(s.e0.get() + b, p, len, 1 - 0.999f);
      }
    };
    for (int w = 1; w < threads; ++w) workers.emplace_back(worker, w);
    worker(0);
    for (auto& th : workers) th.join();
  });

  // Triad moving the bytes of fused adamw+1 ema: 36 B/elem * n = 12 B/elem * 3n.
  const int64_t nt = 3 * n;
  Buffer ta = Alloc(nt, threads, 0.f), tb = Alloc(nt, threads, 1.f), tc = Alloc(nt, threads, 2.f);
  const size_t triad_plain = add("triad (same bytes as fused+1)", 12, nt, [&] {
    ParallelFor(nt, threads, [&](int64_t b, int64_t e) {
      Triad(ta.get() + b, tb.get() + b, tc.get() + b, e - b, 0.5f);
    });
  });
  const size_t triad_nt = add("triad, non-temporal stores", 12, nt, [&] {
    ParallelFor(nt, threads, [&](int64_t b, int64_t e) {
      TriadNt(ta.get() + b, tb.get() + b, tc.get() + b, e - b, 0.5f);
    });
  });
  if (threads > 1) {
    add("fused adamw+1 ema, 1 thread", 36, n, [&] { fused(1, false, 1); });
    add("triad non-temporal, 1 thread", 12, nt,
        [&] { TriadNt(ta.get(), tb.get(), tc.get(), nt, 0.5f); });
  }

  TimeRoundRobin(variants, iters);
  std::printf("%-34s %10s %12s %10s\n", "variant", "bytes/elem", "time ms", "GB/s");
  for (const Variant& v : variants) {
    std::printf("%-34s %10.1f %12.3f %10.2f\n", v.name.c_str(), v.bytes_per_elem, v.Median(),
                v.GBps());
  }
  // The reference is the faster triad (the best streaming bandwidth we can get).
  const Variant& triad = variants[triad_nt].Median() < variants[triad_plain].Median()
                             ? variants[triad_nt]
                             : variants[triad_plain];
  const Variant &fused0 = variants[f0], &fused1 = variants[f1];
  const double slot_bytes =
      (fused1.Median() - fused0.Median()) * fused1.GBps() * 1e6 / static_cast<double>(n);
  std::printf(
      "summary: fused_vs_triad=%.3f fused_vs_separate=%.3f ema_slot_bytes=%.2f "
      "fused_ema1_GBps=%.2f triad_GBps=%.2f fused0_ms=%.3f fused_fp32_ms=%.3f "
      "fused_bf16_ms=%.3f fused_bf16_sr_ms=%.3f fused_delta_bf16_ms=%.3f "
      "fused_delta_bf16_sr_ms=%.3f threads=%d numel=%lld\n",
      fused1.GBps() / triad.GBps(), variants[sep].Median() / fused1.Median(), slot_bytes,
      fused1.GBps(), triad.GBps(), fused0.Median(), fused1.Median(), variants[st_bf16].Median(),
      variants[st_sr].Median(), variants[st_delta].Median(), variants[st_delta_sr].Median(),
      threads, static_cast<long long>(n));
  return 0;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
