// NvtxRange: a named NVTX range on the calling thread for the timeline of Nsight Systems, pushed
// by the constructor and popped by the destructor (scoped, so ranges nest).
//
//   NvtxRange range("gpt forward: block", use);  // `use` shown as the range's payload
//
// NVTX3 is header-only (nvtx3/nvToolsExt.h, in nvtx.cc): with no profiler attached each push
// and pop returns at once (NVTX's own behaviour), so ranges may stay in production code. Names
// are static strings (nothing is formatted per call). In builds without --config=cuda both are
// no-ops. Ranges mark host time; Nsight Systems projects them onto the GPU work they queue.
// Threading: a range must end on the thread that began it.
#ifndef SHARDEMA_FRAMEWORK_CUDA_NVTX_H_
#define SHARDEMA_FRAMEWORK_CUDA_NVTX_H_

#include <cstdint>

namespace shardema {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  NvtxRange(const char* name, int64_t payload);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_CUDA_NVTX_H_
