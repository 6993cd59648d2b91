#include "framework/cuda/nvtx.h"

#if SHARDEMA_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace shardema {

#if SHARDEMA_WITH_CUDA

NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }

NvtxRange::NvtxRange(const char* name, int64_t payload) {
  nvtxEventAttributes_t a = {};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = payload;
  nvtxRangePushEx(&a);
}

NvtxRange::~NvtxRange() { nvtxRangePop(); }

#else  // !SHARDEMA_WITH_CUDA

NvtxRange::NvtxRange(const char*) {}
NvtxRange::NvtxRange(const char*, int64_t) {}
NvtxRange::~NvtxRange() = default;

#endif  // SHARDEMA_WITH_CUDA

}  // namespace shardema
