// Element-wise operations on the memory of a Device, dispatched on the stream's device.
//
// The sharded store and the layers above it run the same protocol on CPU and CUDA; the few
// element-wise passes the store needs are written once here (the optimizer's fused step and the
// EMA update are in optim/step_ops.h). Each call takes a Stream whose
// `device` says where the arrays live:
//   * CPU (Stream{Device::Cpu()}): the pass runs at once on the calling thread, with exactly the
//     code the CPU store always used (memset, ConvertBuffer, the running-mean loop), so CPU
//     results are unchanged bit for bit.
//   * CUDA: the device twin (fsdp/cuda, framework/cuda/convert_kernels.h) is enqueued on
//     stream.native after making stream.device current; the call returns once queued. Every
//     CUDA twin is bit-identical to the CPU pass for the same inputs (see their headers).
//
//   FillZero(s, dst, bytes)                  dst[0..bytes) = 0
//   ConvertOn(s, src, st, dst, dt, n)        dst = src rounded to dt (framework/dtype.h rounding)
//   FoldMeanOn(s, mean, x, xt, n, count, d)  running mean over micro-batches of y = f32(x) / d
//                                            (d = divisor: the world size when x is a sum over
//                                            ranks; CUDA: d must be 1): count == 1 copies y; else
//                                            mean += (y - mean) * f32(1/count). y rounds exactly as
//                                            an averaging reduce-scatter's x / d did.
//   EnterDevice(s, what)                     makes s.device current for CUDA work (errors name
//                                            `what`); kUnavailable without CUDA
//
// Contract: the arrays are memory of stream.device (CUDA: memory that device can address) and
// stay alive until the work is done on the stream; preconditions as the underlying kernels.
// Errors: kInvalidArgument for n < 0, count < 1 or divisor < 1 (on CUDA: != 1) (FoldMeanOn); on
// CUDA the kernels' argument errors and launch failures; kUnavailable for a CUDA stream in a build
// without --config=cuda or without a GPU. Threading: calls on distinct arrays are independent; CPU
// calls block the caller.
#ifndef SHARDEMA_FSDP_DEVICE_OPS_H_
#define SHARDEMA_FSDP_DEVICE_OPS_H_

#include <cstddef>
#include <cstdint>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

Status FillZero(Stream stream, void* dst, size_t bytes);

Status ConvertOn(Stream stream, const void* src, DType src_type, void* dst, DType dst_type,
                 size_t n);

Status FoldMeanOn(Stream stream, float* mean, const void* x, DType x_type, int64_t n, int64_t count,
                  int divisor = 1);

// Makes the stream's CUDA device current before queuing CUDA work on it, or explains why CUDA
// work cannot run (kUnavailable in a build without --config=cuda).
Status EnterDevice(Stream stream, const char* what);

// A host vector's worth of f32 elements copied from `src` (memory of `src_device`) with the copy
// queued on `stream` (a stream of src_device when it is a CUDA device), then the stream
// synchronized: the result is complete on return. Errors: CopyBytes / SynchronizeStream.
Status CopyToHostSync(Stream stream, float* host_dst, const float* src, Device src_device,
                      int64_t n);

}  // namespace shardema

#endif  // SHARDEMA_FSDP_DEVICE_OPS_H_
