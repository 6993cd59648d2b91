"""Build rules of the CPU emulation of CUDA (framework/cuda_emu/emulator.h).

Under --config=cuda_emu (.bazelrc) `cuda_library` (third_party/cuda/build_defs.bzl) compiles its
.cu sources with emu_sources and EMU_DEVICE_COPTS, and @local_cuda's cudart, cublas and nccl are
this package's emulator, cublas and nccl: every target keeps its BUILD rule, and the GPU tests
run without a GPU. Each .cu source goes through rewrite.py (launch syntax, extern __shared__) and
is compiled with the emulator header included first, __CUDACC__ and SHARDEMA_WITH_CUDA=1 defined;
<cuda_runtime.h> and the other toolkit headers resolve to framework/cuda_emu/include.

In the default configuration only the emulator's own test builds on it (cuda_emu_library). Under
--config=cuda (the real toolkit) the emulator's targets are incompatible (EMU_COMPATIBLE):
`bazel build //...` skips them.
"""

# The emulator's sources, and with EMU_DEVICE_COPTS the emulated device code: AddressSanitizer
# and UBSan, so an access past a buffer (host memory stands in for device memory) or a signed
# overflow in a kernel fails its test. The emulator's libraries link the sanitizer runtimes into
# every binary that uses them (EMU_LINKOPTS); host code stays as the CPU build compiles it.
EMU_COPTS = [
    "-DSHARDEMA_WITH_CUDA=1",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]

EMU_LINKOPTS = ["-fsanitize=address,undefined"]

# Device code (.cu rewritten by emu_sources).
EMU_DEVICE_COPTS = EMU_COPTS + [
    "-Wno-unknown-pragmas",  # #pragma unroll
    # __shared__ variables sit in their own section (emulator.h); without this the sanitizer
    # leaves globals in named sections unchecked.
    "-fsanitize-sections=shardema_emu_shared",
    "-D__CUDACC__",
    "-include",
    "framework/cuda_emu/emulator.h",
]

# Under --config=cuda a constraint no platform has (//framework/cuda_emu:no_platform) makes the
# emulator's targets incompatible: `bazel build //...` skips them.
EMU_COMPATIBLE = select({
    "//:cuda_enabled": ["//framework/cuda_emu:no_platform"],
    "//conditions:default": [],
})

def _stem(label):
    name = label.split(":")[-1].split("/")[-1]
    return name[:-len(".cu")] if name.endswith(".cu") else name

def emu_sources(name, srcs, testonly = False):
    """Declares one rewrite.py genrule per .cu file of srcs; returns the generated .cc labels."""
    outs = []
    for src in srcs:
        out = "%s_emu/%s.cc" % (name, _stem(src))
        native.genrule(
            name = "%s_%s_emu" % (name, _stem(src)),
            srcs = [src],
            outs = [out],
            tools = ["//framework/cuda_emu:rewrite.py"],
            cmd = "python3 $(location //framework/cuda_emu:rewrite.py) $< $@",
            testonly = testonly,
            visibility = ["//visibility:private"],
        )
        outs.append(":" + out)
    return outs

def cuda_emu_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """A testonly cc_library of .cu `srcs` compiled for the emulation in any configuration."""
    native.cc_library(
        name = name,
        srcs = emu_sources(name, srcs, testonly = True),
        hdrs = hdrs,
        copts = EMU_DEVICE_COPTS,
        deps = deps + ["//framework/cuda_emu:emulator"],
        target_compatible_with = EMU_COMPATIBLE,
        testonly = True,
        **kwargs
    )
