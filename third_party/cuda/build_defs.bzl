"""cuda_library: compile .cu files with nvcc for sm_90 under --config=cuda.

Without --config=cuda the target is an empty cc_library, so everything that depends on it still
builds CPU-only; code guards its CUDA calls with `#if SHARDEMA_WITH_CUDA`. Under --config=cuda with
no CUDA toolkit found, the build fails with a message saying so.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

CUDA_ARCH_FLAGS = ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]

# Compile definition every target that may use CUDA sees (0 or 1).
CUDA_DEFINES = select({
    "//:cuda_enabled": ["SHARDEMA_WITH_CUDA=1"],
    "//conditions:default": ["SHARDEMA_WITH_CUDA=0"],
})

def if_cuda(if_true, if_false = []):
    """Selects if_true under --config=cuda, else if_false."""
    return select({
        "//:cuda_enabled": if_true,
        "//conditions:default": if_false,
    })

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (one object per source)."""
    objs = []
    for src in srcs:
        obj = "_objs_%s/%s.o" % (name, src.replace("/", "_").replace(".cu", ""))
        if CUDA_AVAILABLE:
            nvcc_cmd = " ".join([
                NVCC,
                "-std=c++17 -O3 --expt-relaxed-constexpr -Xcompiler=-fPIC,-O2",
                " ".join(CUDA_ARCH_FLAGS),
                "-DSHARDEMA_WITH_CUDA=1",
                "-I. -I$(GENDIR)",
                " ".join(copts),
                "-c $(location %s) -o $@" % src,
            ])
        else:
            nvcc_cmd = "echo 'cuda_library(%s): --config=cuda was given but no CUDA toolkit (nvcc) was found; install CUDA or set CUDA_PATH' >&2; exit 1" % name
        native.genrule(
            name = "%s_%s_nvcc" % (name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs,
            outs = [obj],
            cmd = select({
                "//:cuda_enabled": nvcc_cmd,
                "//conditions:default": "touch $@",
            }),
            # nvcc reads headers of other packages through the execroot (-I.), outside the
            # declared inputs, so the action runs unsandboxed.
            tags = ["cuda", "no-sandbox"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = if_cuda(objs),
        hdrs = hdrs,
        deps = deps + if_cuda(["@local_cuda//:cudart"]),
        defines = [],
        **kwargs
    )
