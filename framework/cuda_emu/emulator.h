// A CPU emulation of the CUDA execution model, for running the project's own kernels (.cu files)
// in tests on machines without a GPU. It is no GPU: it says nothing about speed, memory
// coherence between blocks, or cuBLAS/cuDNN/NCCL; it runs the kernels' arithmetic and indexing,
// their barriers and warp shuffles, and checks launch configurations as the runtime does.
//
// How a .cu file becomes an emulated one (framework/cuda_emu/defs.bzl, rewrite.py): the launch
// syntax `k<<<grid, block, smem, stream>>>(args)` becomes `Launch(k, grid, block, smem,
// stream)(args)`, `extern __shared__ T name[];` becomes a pointer to the launch's dynamic shared
// memory, and the file is compiled by the host compiler with this header included first and
// __CUDACC__ defined (the headers <cuda_runtime.h> and <math_constants.h> resolve to the files of
// framework/cuda_emu/include/).
//
// Execution: a launch is queued on its stream (include/cuda_runtime.h: a worker thread per stream)
// and runs its blocks one after another, in an order drawn for the launch (not the index order: a
// GPU promises none; the same launch always draws the same); grids of different streams run one at
// a time (one lock). The threads of a block are fibers scheduled round robin, in an order drawn
// for the block, forwards and backwards in turn; a fiber runs until it finishes or waits at a
// barrier, so memory a block writes is seen by the next block; shared memory, `__shared__`
// variables (static storage, one section) and dynamic, is set to 0xff bytes as each block starts,
// so a read before the block wrote it sees NaN, not the previous block's values. Kernels must not
// wait on another block (no grid sync).
//
// Checked, each a fatal error that names the kernel's launch and the thread (std::abort, so a
// test dies with the message): __syncthreads() that not every thread of the block reaches (one
// exited, or the threads wait at different barriers forever), a warp shuffle or __syncwarp whose
// mask names a lane that never arrives or that exited, a shuffle reading a lane outside its mask.
// Launch configurations the runtime refuses (0 or > 1024 threads a block, block z > 64, grid
// y/z > 65535, dynamic shared memory above 48 KiB without cudaFuncSetAttribute or above the
// sm_90 limit) set the launch error that cudaGetLastError returns, and run nothing.
//
// Floating point: host IEEE arithmetic (no fused multiply-add unless the source calls fmaf) and
// the host's libm, so results agree with a GPU to rounding, not bit for bit. Only the intrinsics,
// vector types and built-ins the project's kernels use are defined: a kernel that starts using
// another fails to compile here until it is added.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- Types and codes of the runtime API (the values are the CUDA runtime's) ----

struct uint3 {
  unsigned x, y, z;
};
// Vector types with the device's alignment (vectorised loads read them whole).
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace shardema::cuda_emu {

constexpr unsigned kWarpSize = 32;
constexpr size_t kDefaultDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute
constexpr size_t kMaxDynamicShared = 227 * 1024;     // sm_90's opt-in limit a block

namespace detail {

// The running emulated thread: its indices and the launch's shape.
struct ThreadState {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
const ThreadState& Self();

void SyncThreads();
void SyncWarp(unsigned mask);
// Lane `src` of the warp's values of this exchange (every lane in `mask` takes part).
uint64_t WarpExchange(unsigned mask, uint64_t bits, unsigned src);
unsigned LaneId();
char* DynamicShared();
// Adds [begin, end), a shared object's `__shared__` variables (section shardema_emu_shared below),
// to the memory every block starts with set to 0xff bytes, as dynamic shared memory does; a null
// or empty range adds nothing. Returns true.
bool RegisterShared(char* begin, char* end);

// The launch error of a configuration (cudaSuccess when the runtime would take it).
cudaError_t CheckLaunch(const void* kernel, dim3 grid, dim3 block, size_t smem);
// Runs `body` once per thread of every block of a checked configuration, on the calling thread
// (launches from several threads run one at a time). `where` names the launch in fatal errors.
void RunGrid(const char* where, dim3 grid, dim3 block, size_t smem,
             const std::function<void()>& body);
// Queues `task` on `stream` (nullptr: the default stream); runtime.cc.
void Enqueue(cudaStream_t stream, std::function<void()> task);
cudaError_t SetMaxDynamicShared(const void* kernel, int bytes);
cudaError_t& LastError();

template <typename T>
T Shuffle(unsigned mask, T v, unsigned src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a scalar");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = WarpExchange(mask, bits, src);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace detail

// The callable that `k<<<grid, block, smem, stream>>>` becomes: calling it with the kernel's
// arguments checks the configuration (a refused one sets the launch error and queues nothing)
// and queues the grid on the stream, its parameters converted to the kernel's parameter types
// and copied now, as a launch copies them.
template <typename... P>
class Launcher {
 public:
  Launcher(const char* where, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
           cudaStream_t stream)
      : where_(where), kernel_(kernel), grid_(grid), block_(block), smem_(smem), stream_(stream) {}
  template <typename... A>
  void operator()(A&&... args) const {
    const cudaError_t e =
        detail::CheckLaunch(reinterpret_cast<const void*>(kernel_), grid_, block_, smem_);
    if (e != cudaSuccess) {
      detail::LastError() = e;
      return;
    }
    auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    const char* where = where_;
    void (*kernel)(P...) = kernel_;
    const dim3 grid = grid_, block = block_;
    const size_t smem = smem_;
    detail::Enqueue(stream_, [=] {
      detail::RunGrid(where, grid, block, smem, [&] { std::apply(kernel, *params); });
    });
  }

 private:
  const char* where_;
  void (*kernel_)(P...);
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};

// `where`: the kernel and its source line (rewrite.py writes it).
template <typename... P>
Launcher<P...> Launch(const char* where, void (*kernel)(P...), dim3 grid, dim3 block,
                      size_t smem = 0, cudaStream_t stream = nullptr) {
  return Launcher<P...>(where, kernel, grid, block, smem, stream);
}

}  // namespace shardema::cuda_emu

// ---- Keywords and built-in variables ----

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
// `__shared__` variables live in one section per shared object (registered below), so that each
// block starts with them unset (0xff bytes) instead of the previous block's values.
#define __shared__ static __attribute__((section("shardema_emu_shared")))
#define threadIdx (::shardema::cuda_emu::detail::Self().thread_idx)
#define blockIdx (::shardema::cuda_emu::detail::Self().block_idx)
#define blockDim (::shardema::cuda_emu::detail::Self().block_dim)
#define gridDim (::shardema::cuda_emu::detail::Self().grid_dim)
#define warpSize (int(::shardema::cuda_emu::kWarpSize))

// The linker's bounds of this shared object's section of `__shared__` variables (null when it has
// none); every translation unit that includes this header registers them once.
extern "C" char __start_shardema_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_shardema_emu_shared[] __attribute__((weak, visibility("hidden")));
namespace shardema::cuda_emu::detail {
[[maybe_unused]] static const bool shared_registered =
    RegisterShared(__start_shardema_emu_shared, __stop_shardema_emu_shared);
}  // namespace shardema::cuda_emu::detail

// ---- Device functions ----

inline void __syncthreads() { ::shardema::cuda_emu::detail::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::shardema::cuda_emu::detail::SyncWarp(mask);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const unsigned lane = ::shardema::cuda_emu::detail::LaneId();
  const unsigned src = lane / unsigned(width) * unsigned(width) + unsigned(src_lane % width);
  return ::shardema::cuda_emu::detail::Shuffle(mask, v, src);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned lane = ::shardema::cuda_emu::detail::LaneId();
  const unsigned src = lane ^ unsigned(lane_mask);
  const T got = ::shardema::cuda_emu::detail::Shuffle(mask, v, src);
  // A lane of a later group of `width` lanes gives the caller its own value.
  return src / unsigned(width) > lane / unsigned(width) ? v : got;
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::shardema::cuda_emu::detail::LaneId();
  const unsigned src = lane + delta;
  const bool own = src / unsigned(width) != lane / unsigned(width);
  const T got = ::shardema::cuda_emu::detail::Shuffle(mask, v, own ? lane : src);
  return own ? v : got;
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned lane = ::shardema::cuda_emu::detail::LaneId();
  const bool own = lane % unsigned(width) < delta;
  const T got = ::shardema::cuda_emu::detail::Shuffle(mask, v, own ? lane : lane - delta);
  return own ? v : got;
}

inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

// Loads and stores with cache hints: plain accesses here.
template <typename T>
T __ldcs(const T* p) {
  return *p;
}
template <typename T>
void __stcs(T* p, T v) {
  *p = v;
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
// cudaFuncSetAttribute's part (the rest of the runtime API: include/cuda_runtime.h).
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return ::shardema::cuda_emu::detail::SetMaxDynamicShared(reinterpret_cast<const void*>(kernel),
                                                           value);
}
cudaError_t cudaGetLastError();

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_EMULATOR_H_
