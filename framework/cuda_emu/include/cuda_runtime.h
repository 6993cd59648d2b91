// The CPU emulation's <cuda_runtime.h> (framework/cuda_emu): the execution model of emulator.h
// and the runtime calls the project makes, on host memory with one emulated device. Work is
// synchronous: every call has finished when it returns, so streams and events only keep what
// the API promises (a stream or event is complete when queried; an event records the host time
// for cudaEventElapsedTime). Found before the toolkit's header only in targets built with
// framework/cuda_emu's rules. Thread-safe.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_

#include <cstddef>

#include "framework/cuda_emu/emulator.h"

enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
using cudaHostFn_t = void (*)(void*);

constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;

const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

// One device, index 0.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();

// Device and pinned memory are host allocations of exactly the size asked for (an access past
// the end is AddressSanitizer's error), 256-byte aligned as cudaMalloc's.
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// cudaErrorInvalidResourceHandle for an event made with cudaEventDisableTiming, as the runtime.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
