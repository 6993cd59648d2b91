"""Repository rules that locate system toolkits instead of hard-coding their paths.

mpi_configure: OpenMPI (or any MPI whose compiler wrapper answers `--showme:*`).
cuda_configure: the CUDA toolkit, found from `nvcc` on PATH, then $CUDA_PATH, then /usr/local/cuda.
    With it, cuDNN's header-only C++ frontend (@local_cuda//:cudnn_frontend), the version
    third_party/cudnn_frontend.version names, which tools/setup.sh unpacks into shardema's
    .deps/cudnn_frontend/VERSION (CUDNN_FRONTEND_AVAILABLE says whether it was found).
"""

def _lines(ctx, argv):
    r = ctx.execute(argv)
    if r.return_code != 0:
        fail("'%s' failed: %s" % (" ".join(argv), r.stderr))
    return [w for w in r.stdout.strip().split(" ") if w]

def _mpi_configure_impl(ctx):
    mpicxx = ctx.which("mpicxx")
    if mpicxx == None:
        fail("mpicxx not found on PATH: run tools/setup.sh (Debian packages libopenmpi-dev, openmpi-bin)")
    incdirs = _lines(ctx, [mpicxx, "--showme:incdirs"])
    libdirs = _lines(ctx, [mpicxx, "--showme:libdirs"])
    includes = []
    for i, d in enumerate(incdirs):
        ctx.symlink(d, "include%d" % i)
        includes.append("include%d" % i)
    linkopts = []
    for d in libdirs:
        linkopts += ["-L" + d, "-Wl,-rpath," + d]
    linkopts.append("-lmpi")
    ctx.file("BUILD", """package(default_visibility = ["//visibility:public"])

cc_library(
    name = "mpi",
    hdrs = glob([{globs}]),
    includes = {includes},
    linkopts = {linkopts},
    # C API only: the deprecated C++ bindings' headers are not in the glob above.
    defines = ["OMPI_SKIP_MPICXX=1", "MPICH_SKIP_MPICXX=1"],
)

exports_files(["mpirun_path.txt"])
""".format(
        globs = ", ".join(['"%s/*.h"' % i for i in includes]),
        includes = repr(includes),
        linkopts = repr(linkopts),
    ))
    mpirun = ctx.which("mpirun")
    ctx.file("mpirun_path.txt", str(mpirun) if mpirun else "")

mpi_configure = repository_rule(
    implementation = _mpi_configure_impl,
    environ = ["PATH"],
    local = True,
)

def _find_nvcc(ctx):
    nvcc = ctx.which("nvcc")
    if nvcc != None:
        return str(nvcc)
    for root in [ctx.os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]:
        if root and ctx.path(root + "/bin/nvcc").exists:
            return root + "/bin/nvcc"
    return None

_CUDA_BUILD = """package(default_visibility = ["//visibility:public"])

# Under --config=cuda_emu (shardema's //:cuda_emulated) these are the CPU emulation's libraries
# (framework/cuda_emu), and the toolkit's headers and libraries stay out of every compile and link.
EMU = "{emu}"

cc_library(
    name = "cuda_headers",
    hdrs = select({{
        EMU: [],
        "//conditions:default": glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"], allow_empty = True),
    }}),
    includes = select({{EMU: [], "//conditions:default": ["include"]}}),
    deps = select({{EMU: ["{emulator}"], "//conditions:default": []}}),
)

cc_library(
    name = "cudart",
    linkopts = select({{EMU: [], "//conditions:default": {rt_linkopts}}}),
    deps = select({{EMU: ["{emulator}"], "//conditions:default": [":cuda_headers"]}}),
)

cc_library(
    name = "cublas",
    linkopts = select({{EMU: [], "//conditions:default": ["-lcublas", "-lcublasLt"]}}),
    deps = [":cudart"] + select({{EMU: ["{cublas}"], "//conditions:default": []}}),
)

cc_library(
    name = "nccl",
    linkopts = select({{EMU: [], "//conditions:default": ["-lnccl"]}}),
    deps = [":cudart"] + select({{EMU: ["{nccl}"], "//conditions:default": []}}),
)

cc_library(
    name = "cudnn_frontend",
    hdrs = select({{
        EMU: [],
        "//conditions:default": glob(["cudnn_frontend/include/**/*.h", "cudnn_frontend/include/**/*.hpp"], allow_empty = True),
    }}),
    includes = select({{EMU: [], "//conditions:default": ["cudnn_frontend/include"]}}),
    deps = [":cuda_headers"],
)
"""

def _shardema_label(name):
    """`name` (a label in shardema) as the generated BUILD file must write it: shardema is the main
    repository here, and @shardema in a workspace that depends on it."""
    l = Label(name)
    return "@%s//%s:%s" % (l.workspace_name, l.package, l.name)

def _cuda_build(rt_linkopts):
    return _CUDA_BUILD.format(
        rt_linkopts = rt_linkopts,
        emu = _shardema_label("//:cuda_emulated"),
        emulator = _shardema_label("//framework/cuda_emu:emulator"),
        cublas = _shardema_label("//framework/cuda_emu:cublas"),
        nccl = _shardema_label("//framework/cuda_emu:nccl"),
    )

def _cudnn_frontend(ctx):
    """Links shardema's .deps/cudnn_frontend/VERSION/include as cudnn_frontend/include; True
    when it holds cudnn_frontend.h (else an empty folder)."""
    version = ctx.read(Label("//third_party:cudnn_frontend.version")).strip()
    inc = ctx.path(Label("//:WORKSPACE")).dirname.get_child(".deps").get_child("cudnn_frontend")
    inc = inc.get_child(version).get_child("include")
    if inc.get_child("cudnn_frontend.h").exists:
        ctx.symlink(inc, "cudnn_frontend/include")
        return True
    ctx.file("cudnn_frontend/include/.keep", "")
    return False

def _cuda_configure_impl(ctx):
    nvcc = _find_nvcc(ctx)
    if nvcc == None:
        ctx.file("BUILD", _cuda_build("[]"))
        ctx.file("include/.keep", "")
        ctx.file("cudnn_frontend/include/.keep", "")
        ctx.file("defs.bzl", "CUDA_AVAILABLE = False\nNVCC = \"\"\nCUDA_ROOT = \"\"\n" +
                             "CUDNN_FRONTEND_AVAILABLE = False\n")
        return
    root = str(ctx.path(nvcc).dirname.dirname.realpath)
    ctx.symlink(root + "/include", "include")
    libdir = root + "/lib64"
    if not ctx.path(libdir).exists:
        libdir = root + "/targets/x86_64-linux/lib"
    rt = ["-L" + libdir, "-Wl,-rpath," + libdir, "-lcudart"]
    ctx.file("BUILD", _cuda_build(repr(rt)))
    ctx.file("defs.bzl", "CUDA_AVAILABLE = True\nNVCC = %r\nCUDA_ROOT = %r\n" % (nvcc, root) +
                         "CUDNN_FRONTEND_AVAILABLE = %r\n" % _cudnn_frontend(ctx))

# Re-run by `bazel sync --configure` (e.g. after tools/setup.sh fetched the cuDNN frontend into a
# workspace that was configured before).
cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["PATH", "CUDA_PATH"],
    local = True,
    configure = True,
)

