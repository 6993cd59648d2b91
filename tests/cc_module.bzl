"""cc_module: one concept = one cc_library `name` (name.cc, name.h) and its cc_test next to it.

cc_module(name = "foo", deps = [...], test_deps = [...]) defines
  foo       cc_library(srcs = ["foo.cc"], hdrs = ["foo.h"], deps = deps)
            (header_only = True: no srcs)
  foo_test  cc_test(srcs = ["foo_test.cc"], deps = [":foo", gtest_main] + test_deps)
Everything else a target needs (copts, local_defines, data, ...) goes to the library through
**kwargs; test_size, test_tags, test_copts and test_data go to the test. A library with several tests or a
multi-rank test (tests/mpi_test.bzl) is written out instead.
"""

load("//third_party/cuda:build_defs.bzl", "CUDA_DEFINES")

_GTEST_MAIN = "@system_usr//:gtest_main"

def cc_module(name, deps = [], test_deps = [], header_only = False, test_size = None,
              test_tags = [], test_copts = [], test_data = [], **kwargs):
    native.cc_library(
        name = name,
        srcs = [] if header_only else [name + ".cc"],
        hdrs = [name + ".h"],
        deps = deps,
        **kwargs
    )
    test_kwargs = {"size": test_size} if test_size else {}
    native.cc_test(
        name = name + "_test",
        srcs = [name + "_test.cc"],
        deps = [":" + name, _GTEST_MAIN] + test_deps,
        tags = test_tags,
        copts = test_copts,
        data = test_data,
        **test_kwargs
    )

def gpu_test(name, deps = [], copts = [], size = None):
    """A CUDA test `name` (srcs [name + ".cc"]) tagged "gpu": it builds on the CPU too and its
    cases skip without a visible GPU (//framework/cuda:cuda_test_util, gtest main linked)."""
    kwargs = {"size": size} if size else {}
    native.cc_test(
        name = name,
        srcs = [name + ".cc"],
        copts = copts,
        local_defines = CUDA_DEFINES,
        tags = ["gpu"],
        deps = ["//framework/cuda:cuda_test_util", _GTEST_MAIN] + deps,
        **kwargs
    )
