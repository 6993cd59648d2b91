// The CPU emulation's <nvtx3/nvToolsExt.h>: the NVTX calls framework/cuda/nvtx.cc makes, as
// no-ops (there is no profiler to name ranges for).
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_NVTX3_NVTOOLSEXT_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_NVTX3_NVTOOLSEXT_H_

#include <cstdint>

#define NVTX_VERSION 3
#define NVTX_EVENT_ATTRIB_STRUCT_SIZE uint16_t(sizeof(nvtxEventAttributes_t))
enum { NVTX_MESSAGE_TYPE_ASCII = 1 };
enum { NVTX_PAYLOAD_TYPE_INT64 = 2 };

struct nvtxEventAttributes_t {
  uint16_t version, size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType, reserved0;
  union {
    uint64_t ullValue;
    int64_t llValue;
    double dValue;
  } payload;
  int32_t messageType;
  union {
    const char* ascii;
  } message;
};

inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePushEx(const nvtxEventAttributes_t*) { return 0; }
inline int nvtxRangePop() { return 0; }

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_NVTX3_NVTOOLSEXT_H_
