// CpuContext: the threads the CPU layers of nn/ may use (the `--compute-threads` setting).
//
// Every CPU layer function takes a `const CpuContext&` first. A default-constructed context (or
// CpuContext(1)) runs everything on the calling thread; CpuContext(n) with n > 1 owns an
// Eigen::ThreadPool of n - 1 workers and ParallelFor splits work over the pool and the calling
// thread (n lanes in all).
//
// Determinism: ParallelFor cuts [0, count) into the same contiguous chunks for the same (count,
// threads), and every layer assigns each output element to exactly one chunk and sums in a fixed
// order, so results are bit-identical from run to run at a fixed thread count. Different thread
// counts may differ by float rounding only where a GEMM is split (the GEMM's own blocking
// changes with the chunk size); element-wise layers, LayerNorm, attention's softmax and the
// losses give the same bits at every thread count.
//
// Threading: a context is used by one thread at a time (ParallelFor is not re-entrant and must
// not be called from inside one of its own chunks). Layers may be called from any thread that
// owns the context. The pool's threads live as long as the context.
//
// Stack: the GEMMs keep Eigen's two packing blocks on the running thread's stack (up to 2 MiB
// each, nn/BUILD's EIGEN_BLOCK_COPTS), so call the layers from threads with at least 6 MiB of
// stack: the main thread and std::thread get 8 MiB by default (ulimit -s), as do the pool's.
#ifndef SHARDEMA_NN_CPU_CONTEXT_H_
#define SHARDEMA_NN_CPU_CONTEXT_H_

#include <cstdint>
#include <memory>
#include <type_traits>

namespace shardema::nn {

class CpuContext {
 public:
  // threads < 1 is treated as 1.
  explicit CpuContext(int threads = 1);
  ~CpuContext();
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;

  int threads() const { return threads_; }

  // Calls fn(begin, end) for consecutive chunks covering [0, count), at most threads() chunks of
  // at least `grain` items each (the last chunk takes the remainder), concurrently, and returns
  // when all are done. count <= 0 calls nothing; one chunk runs inline on the calling thread.
  // fn: any callable as fn(int64_t begin, int64_t end).
  template <typename Fn>
  void ParallelFor(int64_t count, int64_t grain, Fn&& fn) const {
    using F = std::remove_reference_t<Fn>;
    ParallelForRaw(
        count, grain,
        [](void* f, int64_t begin, int64_t end) { (*static_cast<F*>(f))(begin, end); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // The same with a plain function pointer: calls chunk(arg, begin, end). (No std::function:
  // the ISA-specific kernels of nn/ must not instantiate shared library templates.)
  using ChunkFn = void (*)(void* arg, int64_t begin, int64_t end);
  void ParallelForRaw(int64_t count, int64_t grain, ChunkFn chunk, void* arg) const;

 private:
  struct Pool;  // an Eigen::ThreadPool
  int threads_ = 1;
  std::unique_ptr<Pool> pool_;
};

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_CPU_CONTEXT_H_
