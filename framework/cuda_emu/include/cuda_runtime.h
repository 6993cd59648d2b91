// The CPU emulation's <cuda_runtime.h> (framework/cuda_emu): the execution model of emulator.h
// and the runtime calls the project makes, on host memory with emulated devices.
// Streams are asynchronous as on a GPU: each runs its work (kernels, copies, cuBLAS and NCCL
// calls, host functions, event records and waits) in order on a thread of its own, so a missing
// event dependency lets work run early or late here too (runtime.cc says how). Found before the
// toolkit's header only in targets built with framework/cuda_emu's rules. Thread-safe.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_

#include <cstddef>

#include "framework/cuda_emu/emulator.h"

enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
#define CUDART_CB
using cudaHostFn_t = void (*)(void*);

constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0;

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
// The emulated device's properties: an H200's name, SM count and memory.
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int multiProcessorCount;
  int major, minor;
  int memoryClockRate;
  int memoryBusWidth;
};

enum cudaMemAllocationType { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemLocationType { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1 };
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  int handleTypes;
  cudaMemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;

const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

// $SHARDEMA_CUDA_EMU_DEVICES devices (default 4), all host memory; the current one is per thread.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
// Free: the emulated device's 141 GiB less a context's 512 MiB and what cudaMalloc holds.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
// Device memory (cudaMalloc, pools) and pinned host memory (cudaHostAlloc) are known by their
// address ranges; any other pointer is cudaMemoryTypeUnregistered.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p);

// Device and pinned memory are host allocations of exactly the size asked for (an access past
// the end is AddressSanitizer's error), 256-byte aligned as cudaMalloc's.
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t pool, cudaStream_t s);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
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
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// cudaErrorInvalidResourceHandle for an event made with cudaEventDisableTiming, as the runtime.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// 8 blocks of any kernel per SM (the emulation has no occupancy limit worth modelling).
template <typename K>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, K, int, size_t) {
  if (blocks == nullptr) return cudaErrorInvalidValue;
  *blocks = 8;
  return cudaSuccess;
}

#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
