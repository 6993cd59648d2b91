"""cuda_library: compile .cu files with nvcc for sm_90 under --config=cuda.

Without --config=cuda the target is an empty cc_library (its headers only), so everything that
depends on it still builds CPU-only; code guards its CUDA calls with `#if SHARDEMA_WITH_CUDA`.
Under --config=cuda with no CUDA toolkit found, analysis fails with a message saying so.
Under --config=cuda_emu the .cu files are rewritten and compiled by the host compiler for the CPU
emulation of framework/cuda_emu (emu_sources there), and @local_cuda's libraries are the
emulation's: the GPU tests run without a GPU.

Each .cu source is compiled by its own sandboxed nvcc action. The action's inputs are the source,
the target's `hdrs` and the transitive headers of `deps` (from their CcInfo), and its include paths
and defines are those `deps` export, so a change to any header a kernel includes recompiles it.
The object is compiled with -fPIC and handed to a cc_library as a `.pic.o`, which Bazel links into
both shared libraries and binaries. Kernels are whole-program (no -rdc): a .cu file may not
call __device__ functions defined in another .cu file.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")
load("//framework/cuda_emu:defs.bzl", "EMU_DEVICE_COPTS", "emu_sources")

CUDA_ARCH_FLAGS = ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]

_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    # Source line tables in the device code (no effect on its speed): compute-sanitizer and
    # profilers then name the .cu line of a fault.
    "-lineinfo",
    "--expt-relaxed-constexpr",
    "-Xcompiler=-fPIC,-O2,-Wall,-Wno-sign-compare",
    "-DSHARDEMA_WITH_CUDA=1",
    # nvcc's front end flags `x = Status(...)` (#2810: the assignment operator's result, a
    # reference to a [[nodiscard]] class, is discarded); host compilers rightly do not.
    "--diag-suppress=2810",
]

# Compile definition every target that may use CUDA sees (0 or 1).
CUDA_DEFINES = select({
    "//:cuda_enabled": ["SHARDEMA_WITH_CUDA=1"],
    "//:cuda_emulated": ["SHARDEMA_WITH_CUDA=1"],
    "//conditions:default": ["SHARDEMA_WITH_CUDA=0"],
})

def if_cuda(if_true, if_false = []):
    """Selects if_true under --config=cuda or --config=cuda_emu, else if_false."""
    return select({
        "//:cuda_enabled": if_true,
        "//:cuda_emulated": if_true,
        "//conditions:default": if_false,
    })

def if_cuda_emulated(if_true, if_false = []):
    """Selects if_true under --config=cuda_emu, else if_false."""
    return select({
        "//:cuda_emulated": if_true,
        "//conditions:default": if_false,
    })

def _stem(path):
    return path[:-len(".cu")] if path.endswith(".cu") else path

def _nvcc_objects_impl(ctx):
    if ctx.files.srcs and not CUDA_AVAILABLE:
        fail(("cuda_library(%s): --config=cuda was given but no CUDA toolkit (nvcc) was found; " +
              "install CUDA or set CUDA_PATH") % ctx.label.name[:-len("_nvcc")])
    comps = [d[CcInfo].compilation_context for d in ctx.attr.deps if CcInfo in d]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in comps])
    quote = depset([".", ctx.bin_dir.path], transitive = [c.quote_includes for c in comps])
    incs = depset(transitive = [c.includes for c in comps])
    sys_incs = depset(transitive = [c.system_includes for c in comps])
    defines = depset(transitive = [c.defines for c in comps])
    outs = []
    for src in ctx.files.srcs:
        stem = "_objs/%s/%s" % (ctx.label.name, _stem(src.short_path).replace("/", "_"))
        pic = ctx.actions.declare_file(stem + ".pic.o")
        args = ctx.actions.args()
        args.add_all(_NVCC_FLAGS)
        args.add_all(CUDA_ARCH_FLAGS)
        args.add_all(quote, format_each = "-I%s")
        args.add_all(incs, format_each = "-I%s")
        args.add_all(sys_incs, before_each = "-isystem")
        args.add_all(defines, format_each = "-D%s")
        args.add_all(ctx.attr.copts)
        args.add("-c", src)
        args.add("-o", pic)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [pic],
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc (sm_90)" % src.short_path,
            # nvcc finds the host compiler (g++) through PATH.
            use_default_shell_env = True,
        )
        outs.append(pic)
    return [DefaultInfo(files = depset(outs))]

_nvcc_objects = rule(
    implementation = _nvcc_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (one object per source).

    Args:
      name: the cc_library's name.
      srcs: .cu files (compiled only under --config=cuda).
      hdrs: headers the sources and dependents include; keep them free of CUDA types so that
        .cc files compiled by the host compiler can include them.
      deps: cc_library dependencies; their headers, include paths and defines reach nvcc.
      copts: extra nvcc flags.
      **kwargs: passed to the cc_library (visibility, testonly, ...).
    """
    _nvcc_objects(
        name = name + "_nvcc",
        srcs = select({"//:cuda_enabled": srcs, "//conditions:default": []}),
        hdrs = hdrs,
        deps = deps,
        copts = copts,
        tags = ["cuda"],
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )
    emulated = emu_sources(name, srcs, testonly = kwargs.get("testonly", False))
    native.cc_library(
        name = name,
        srcs = select({
            "//:cuda_enabled": [":%s_nvcc" % name],
            "//:cuda_emulated": emulated,
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        copts = if_cuda_emulated(EMU_DEVICE_COPTS),
        deps = deps + if_cuda(["@local_cuda//:cudart"]),
        **kwargs
    )
