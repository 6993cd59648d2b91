"""cuda_emu_library: a .cu file's kernels compiled by the host compiler for the CPU emulation of
framework/cuda_emu/emulator.h, so that tests run them without a GPU.

Each .cu source goes through rewrite.py (launch syntax, extern __shared__) and is compiled with
the emulator header included first, __CUDACC__, SHARDEMA_WITH_CUDA=1 and SHARDEMA_CUDA_EMULATED=1
defined, and <cuda_runtime.h> / <math_constants.h> taken from framework/cuda_emu/include. The
emulated code and the tests that link it are built with AddressSanitizer and UBSan (EMU_COPTS /
EMU_LINKOPTS), so a kernel's out-of-bounds access or signed overflow fails the test. Both are
testonly and incompatible with --config=cuda (there the real kernels and headers are built;
`bazel build //...` skips these targets).
"""

# Host code of the emulation and tests (no __CUDACC__: they are compiled as the GPU tests are).
EMU_COPTS = [
    "-DSHARDEMA_WITH_CUDA=1",
    "-DSHARDEMA_CUDA_EMULATED=1",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]

EMU_LINKOPTS = ["-fsanitize=address,undefined"]

# Under --config=cuda a constraint no platform has (//framework/cuda_emu:no_platform) makes the
# targets incompatible: `bazel build //...` skips them.
EMU_COMPATIBLE = select({
    "//:cuda_enabled": ["//framework/cuda_emu:no_platform"],
    "//conditions:default": [],
})

def _stem(label):
    name = label.split(":")[-1].split("/")[-1]
    return name[:-len(".cu")] if name.endswith(".cu") else name

def cuda_emu_library(name, srcs, hdrs = [], deps = [], local_defines = [], **kwargs):
    """A testonly cc_library of `srcs` built for the CPU emulation.

    Args:
      name: the cc_library's name.
      srcs: .cu files (each rewritten into `<name>_emu/<stem>.cc` and compiled as device code,
        with __CUDACC__) and .cc files (host code compiled against the emulated runtime).
      hdrs: the headers the sources implement.
      deps: what the sources include, with the `_emu` targets in place of the CUDA ones.
      local_defines: passed to the cc_library(s).
      **kwargs: passed to the cc_library.
    """
    cu = [s for s in srcs if s.endswith(".cu")]
    cc = [s for s in srcs if not s.endswith(".cu")]
    visibility = kwargs.pop("visibility", None)
    outs = []
    for src in cu:
        out = "%s_emu/%s.cc" % (name, _stem(src))
        native.genrule(
            name = "%s_%s_rewrite" % (name, _stem(src)),
            srcs = [src],
            outs = [out],
            tools = ["//framework/cuda_emu:rewrite.py"],
            cmd = "python3 $(location //framework/cuda_emu:rewrite.py) $< $@",
            testonly = True,
            visibility = ["//visibility:private"],
        )
        outs.append(out)
    deps = deps + ["//framework/cuda_emu:emulator"]
    if outs:
        native.cc_library(
            name = name + "_device" if cc else name,
            srcs = outs,
            hdrs = hdrs,
            copts = EMU_COPTS + ["-D__CUDACC__", "-include", "framework/cuda_emu/emulator.h"],
            local_defines = local_defines,
            deps = deps,
            target_compatible_with = EMU_COMPATIBLE,
            testonly = True,
            visibility = ["//visibility:private"] if cc else visibility,
            **kwargs
        )
        if not cc:
            return
        deps = deps + [":%s_device" % name]
    native.cc_library(
        name = name,
        srcs = cc,
        hdrs = hdrs,
        copts = EMU_COPTS,
        local_defines = local_defines,
        deps = deps,
        target_compatible_with = EMU_COMPATIBLE,
        testonly = True,
        visibility = visibility,
        **kwargs
    )

def cuda_emu_test(name, srcs, deps = [], local_defines = [], **kwargs):
    """A cc_test of GPU test sources built against emulated kernels (cuda_emu_library targets).

    The sources see SHARDEMA_WITH_CUDA=1 and SHARDEMA_CUDA_EMULATED=1 (nn/cuda/cuda_test_util.h
    then gives a fixture whose buffers are host memory).
    """
    native.cc_test(
        name = name,
        srcs = srcs,
        copts = EMU_COPTS,
        linkopts = EMU_LINKOPTS,
        deps = deps + ["//framework/cuda_emu:emulator"],
        target_compatible_with = EMU_COMPATIBLE,
        env = {"ASAN_OPTIONS": "detect_leaks=1:detect_stack_use_after_return=0"},
        **kwargs
    )
