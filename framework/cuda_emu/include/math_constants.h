// The CPU emulation's <math_constants.h> (framework/cuda_emu/emulator.h): the constants the
// project's kernels use, with the toolkit header's names and values.
#ifndef SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_MATH_CONSTANTS_H_
#define SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_MATH_CONSTANTS_H_
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")
#endif  // SHARDEMA_FRAMEWORK_CUDA_EMU_INCLUDE_MATH_CONSTANTS_H_
