// gpu_optimizer_bench: memory bandwidth of the fused AdamW + EMA pass on one GPU shard, against a
// device-to-device copy of the same bytes and (optionally) PyTorch's fused AdamW + foreach lerp.
//
// Variants, all on a --numel element f32 shard (default 256M = 1 GiB per array) on GPU 0:
//   fused adamw (+k ema)           FusedStepCuda with k = 0, 1, 2 EMA slots (one launch)
//   fused adamw+1 ema+bf16 copy    ... also writing the bf16 compute copy
//   adamw, then ema pass           FusedStepCuda without slots, then EmaUpdateCuda (unfused)
//   copy, bytes of fused+k         cudaMemcpyAsync device-to-device moving the same bytes
//                                  (read + write) as fused adamw+k ema
// bytes/elem counts reads + writes (fused AdamW: grad r, master rw, m rw, v rw = 28; +8 per EMA
// slot; +2 for a bf16 copy; a copy of B bytes moves 2B). Times are CUDA-event times of single
// calls on one stream, median over --iters rounds; variants are timed round-robin.
//
// --torch-json FILE: the output of bench/peer/torch_fused_adamw.py run on the same machine and
// --numel ({"0": ms, "1": ms, "2": ms, "numel": N, ...}); adds PyTorch rows (their GB/s counts
// PyTorch's own traffic: 28 B/elem for the fused AdamW step + 12 per foreach lerp, which reads
// the parameters again) and the speedups torch ms / fused ms. At equal bandwidth the bytes alone
// bound the speedup by (28 + 12k) / (28 + 8k): 1.0, 1.11, 1.18 for k = 0, 1, 2.
//
// Last line: summary: fused_vs_copy=<min over k=0,1,2 of GB/s fused+k / GB/s copy of the same
// bytes> fused_vs_torch=<torch ms / fused ms at k=2, the fused-EMA case, or na>, the per-k values
// (fused_vs_copy_emaK, fused_vs_torch_emaK), bandwidths, numel and device. Goals:
// fused_vs_copy >= 0.85, fused_vs_torch >= 1.3.
// Built without --config=cuda, or run without a GPU, it says so and prints
// `summary: skipped=1 reason=...` (exit 0).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/adamw_bench_step.h"
#include "bench/bench_util.h"
#include "framework/device.h"
#include "framework/status.h"
#include "optim/cuda/fused_step_cuda.h"
#include "optim/fused_step.h"

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#endif

namespace shardema {
namespace {

constexpr int kMaxSlots = bench::AdamWBenchStep::kMaxEmas;

struct Options {
  int64_t numel = int64_t{256} << 20;
  int iters = 20;
  std::string torch_json;
};

// PyTorch milliseconds per EMA slot count (0..kMaxSlots), from torch_fused_adamw.py.
struct TorchTimes {
  bool present = false;
  std::map<int, double> ms;
  std::string device;
};

StatusOr<TorchTimes> ReadTorchJson(const std::string& path, int64_t numel) {
  TorchTimes t;
  if (path.empty()) return t;
  std::ifstream in(path);
  if (!in) return NotFound("--torch-json: cannot open '", path, "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument("--torch-json '", path, "': not JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("numel") || !j["numel"].is_number_integer()) {
    return InvalidArgument("--torch-json '", path, "': expected an object with integer \"numel\"");
  }
  if (j["numel"].get<int64_t>() != numel) {
    return InvalidArgument("--torch-json '", path, "' was measured at numel ",
                           j["numel"].get<int64_t>(), ", this run uses --numel ", numel,
                           ": rerun the peer with the same size");
  }
  for (int k = 0; k <= kMaxSlots; ++k) {
    const std::string key = std::to_string(k);
    if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() > 0)) {
      return InvalidArgument("--torch-json '", path, "': missing or non-positive \"", key,
                             "\" (milliseconds with ", k, " EMA slots)");
    }
    t.ms[k] = j[key].get<double>();
  }
  if (j.contains("device") && j["device"].is_string()) t.device = j["device"].get<std::string>();
  t.present = true;
  return t;
}

#if SHARDEMA_WITH_CUDA

std::string NoSpaces(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s;
}

struct Variant {
  std::string name;
  double bytes_per_elem;
  std::function<Status()> fn;  // queues one run on the stream
  std::vector<double> ms;
  double Median() const { return bench::Median(ms); }
  double GBps(int64_t n) const { return bytes_per_elem * double(n) / (Median() * 1e6); }
};

// Fills `n` floats on the device with value * (1 + 0.25 * (i % 7)) (positive, moderate).
Status Fill(float* dst, int64_t n, float value, std::vector<float>& host, Stream stream) {
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = value * (1.f + 0.25f * float(i % 7));
  RETURN_IF_ERROR(CopyBytes(dst, stream.device, host.data(), Device::Cpu(), size_t(n) * 4, stream));
  return SynchronizeStream(stream);
}

// Times every variant: one warm-up run each, then `iters` round-robin rounds of one run each.
Status TimeRoundRobin(std::vector<Variant>& variants, int iters, Stream stream) {
  auto* cs = static_cast<cudaStream_t>(stream.native);
  cudaEvent_t start = nullptr, stop = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&start), "cudaEventCreate"));
  Status st = CudaStatus(cudaEventCreate(&stop), "cudaEventCreate");
  for (Variant& v : variants) {
    if (!st.ok()) break;
    st = v.fn();
  }
  if (st.ok()) st = SynchronizeStream(stream);
  for (int i = 0; i < iters && st.ok(); ++i) {
    for (Variant& v : variants) {
      st = CudaStatus(cudaEventRecord(start, cs), "cudaEventRecord");
      if (st.ok()) st = v.fn();
      if (st.ok()) st = CudaStatus(cudaEventRecord(stop, cs), "cudaEventRecord");
      if (st.ok()) st = CudaStatus(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      if (st.ok()) st = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (!st.ok()) break;
      v.ms.push_back(ms);
    }
  }
  cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  return st;
}

Status Run(const Options& o, const TorchTimes& torch) {
  const Device dev = Device::Cuda(0);
  RETURN_IF_ERROR(SetCurrentDevice(dev));
  cudaDeviceProp prop;
  RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"));
  ASSIGN_OR_RETURN(Stream stream, CreateStream(dev));
  const int64_t n = o.numel;
  const size_t bytes = size_t(n) * sizeof(float);

  enum { kGrad, kMaster, kM, kV, kE0, kE1, kArrays };
  std::vector<Buffer> arrays;
  for (int a = 0; a < kArrays; ++a) {
    ASSIGN_OR_RETURN(Buffer b, Buffer::Allocate(bytes, dev));
    arrays.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(Buffer bf16, Buffer::Allocate(size_t(n) * 2, dev));
  // Copy buffers for the largest variant: fused adamw+2 ema moves 44 B/elem, a copy of 22n bytes.
  const size_t max_copy = size_t(n) * (28 + 8 * kMaxSlots) / 2;
  ASSIGN_OR_RETURN(Buffer copy_src, Buffer::Allocate(max_copy, dev));
  ASSIGN_OR_RETURN(Buffer copy_dst, Buffer::Allocate(max_copy, dev));
  {
    std::vector<float> host(static_cast<size_t>(n));
    const float values[kArrays] = {1e-3f, 0.5f, 1e-4f, 1e-6f, 0.5f, 0.5f};
    for (int a = 0; a < kArrays; ++a) {
      RETURN_IF_ERROR(Fill(arrays[a].as<float>(), n, values[a], host, stream));
    }
  }
  RETURN_IF_ERROR(CudaStatus(
      cudaMemsetAsync(copy_src.data(), 0, max_copy, static_cast<cudaStream_t>(stream.native)),
      "cudaMemsetAsync"));

  int64_t step = 0;
  const bench::AdamWBenchStep adamw(n, arrays[kGrad].as<float>(), arrays[kMaster].as<float>(),
                                    arrays[kM].as<float>(), arrays[kV].as<float>(),
                                    arrays[kE0].as<float>(), arrays[kE1].as<float>(), bf16.data());
  auto fused = [&](int slots, bool with_bf16) {
    return FusedStepCuda(adamw.Args(slots, with_bf16, ++step), stream.native);
  };
  auto copy = [&](size_t copy_bytes) {
    return CudaStatus(
        cudaMemcpyAsync(copy_dst.data(), copy_src.data(), copy_bytes, cudaMemcpyDeviceToDevice,
                        static_cast<cudaStream_t>(stream.native)),
        "cudaMemcpyAsync");
  };

  std::vector<Variant> v;
  size_t fused_idx[kMaxSlots + 1], copy_idx[kMaxSlots + 1];
  for (int k = 0; k <= kMaxSlots; ++k) {
    fused_idx[k] = v.size();
    v.push_back({"fused adamw+" + std::to_string(k) + " ema",
                 28.0 + 8 * k,
                 [&fused, k] { return fused(k, false); },
                 {}});
  }
  v.push_back({"fused adamw+1 ema+bf16 copy", 38, [&fused] { return fused(1, true); }, {}});
  v.push_back({"adamw, then ema pass",
               28 + 12,
               [&] {
                 RETURN_IF_ERROR(fused(0, false));
                 return EmaUpdateCuda(arrays[kE0].as<float>(), arrays[kMaster].as<float>(), n,
                                      0.999, stream.native);
               },
               {}});
  for (int k = 0; k <= kMaxSlots; ++k) {
    copy_idx[k] = v.size();
    const double per_elem = 28.0 + 8 * k;
    const size_t copy_bytes = size_t(n) * size_t(per_elem) / 2;
    v.push_back({"copy, bytes of fused+" + std::to_string(k),
                 per_elem,
                 [&copy, copy_bytes] { return copy(copy_bytes); },
                 {}});
  }

  std::printf(
      "# gpu_optimizer_bench: %s (%d SMs), numel %lld (%.0f MiB per f32 array), "
      "iters %d (median of CUDA-event times, variants round-robin)\n",
      prop.name, prop.multiProcessorCount, static_cast<long long>(n), double(bytes) / (1 << 20),
      o.iters);
  RETURN_IF_ERROR(TimeRoundRobin(v, o.iters, stream));
  RETURN_IF_ERROR(SynchronizeStream(stream));
  RETURN_IF_ERROR(DestroyStream(stream));

  std::printf("%-32s %10s %10s %10s %12s\n", "variant", "bytes/elem", "time ms", "GB/s", "vs copy");
  for (size_t i = 0; i < v.size(); ++i) {
    int k = -1;
    for (int s = 0; s <= kMaxSlots; ++s) k = i == fused_idx[s] ? s : k;
    char rel[32] = "";
    if (k >= 0) std::snprintf(rel, sizeof(rel), "%.3f", v[i].GBps(n) / v[copy_idx[k]].GBps(n));
    std::printf("%-32s %10.1f %10.3f %10.1f %12s\n", v[i].name.c_str(), v[i].bytes_per_elem,
                v[i].Median(), v[i].GBps(n), rel);
  }
  double min_vs_copy = 1e30, vs_torch = 0;
  std::string per_k;
  for (int k = 0; k <= kMaxSlots; ++k) {
    const double r = v[fused_idx[k]].GBps(n) / v[copy_idx[k]].GBps(n);
    min_vs_copy = std::min(min_vs_copy, r);
    per_k += " fused_vs_copy_ema" + std::to_string(k) + "=" + std::to_string(r);
  }
  if (torch.present) {
    std::printf("%-32s %10s %10s %10s %12s\n", "pytorch (same machine)", "bytes/elem", "time ms",
                "GB/s", "fused speedup");
    for (int k = 0; k <= kMaxSlots; ++k) {
      const double ms = torch.ms.at(k), speedup = ms / v[fused_idx[k]].Median();
      const double per_elem = 28.0 + 12 * k;  // PyTorch's traffic: each lerp re-reads params
      std::printf("%-32s %10.1f %10.3f %10.1f %12.3f\n",
                  ("torch AdamW(fused)+" + std::to_string(k) + " lerp").c_str(), per_elem, ms,
                  per_elem * double(n) / (ms * 1e6), speedup);
      if (k == kMaxSlots) vs_torch = speedup;
      per_k += " fused_vs_torch_ema" + std::to_string(k) + "=" + std::to_string(speedup);
    }
    if (!torch.device.empty() && torch.device != prop.name) {
      std::printf("# warning: the PyTorch times were measured on '%s', this GPU is '%s'\n",
                  torch.device.c_str(), prop.name);
    }
  }
  std::printf(
      "summary: fused_vs_copy=%.3f fused_vs_torch=%s%s fused_ema1_GBps=%.1f "
      "copy_GBps=%.1f numel=%lld device=%s\n",
      min_vs_copy, torch.present ? std::to_string(vs_torch).c_str() : "na", per_k.c_str(),
      v[fused_idx[1]].GBps(n), v[copy_idx[1]].GBps(n), static_cast<long long>(n),
      NoSpaces(prop.name).c_str());
  return Status::Ok();
}

#endif  // SHARDEMA_WITH_CUDA

int Main(int argc, char** argv) {
  CLI::App app{"Fused AdamW + EMA CUDA kernel bandwidth vs a device copy and PyTorch"};
  Options o;
  app.add_option("--numel", o.numel, "elements in the shard")->check(CLI::PositiveNumber);
  app.add_option("--iters", o.iters, "timed rounds (median)")->check(CLI::PositiveNumber);
  app.add_option("--torch-json", o.torch_json,
                 "output of bench/peer/torch_fused_adamw.py (same machine, same --numel)");
  CLI11_PARSE(app, argc, argv);

  StatusOr<TorchTimes> torch = ReadTorchJson(o.torch_json, o.numel);
  if (!torch.ok()) return bench::ExitWith("gpu_optimizer_bench", torch.status());
  if (!BuiltWithCuda() || CudaDeviceCount() == 0) {
    const bool built = BuiltWithCuda();
    std::printf(
        "# gpu_optimizer_bench needs --config=cuda and a GPU: %s\n",
        built ? "no CUDA device is visible" : "this binary was built without --config=cuda");
    std::printf("summary: skipped=1 reason=%s\n", built ? "no_cuda_device" : "built_without_cuda");
    return 0;
  }
#if SHARDEMA_WITH_CUDA
  return bench::ExitWith("gpu_optimizer_bench", Run(o, *torch));
#else
  return 0;
#endif
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Main(argc, argv); }
