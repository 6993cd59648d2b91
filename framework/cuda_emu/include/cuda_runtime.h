// The CPU emulation's <cuda_runtime.h> (framework/cuda_emu/emulator.h): found before the
// toolkit's only in targets built by cuda_emu_library and cuda_emu_test.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
#include "framework/cuda_emu/emulator.h"
#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_CUDA_RUNTIME_H_
