"""mpi_test: a C++ test binary run under real `mpirun` at several world sizes.

mpi_test(name = "x_test", srcs = [...], deps = [...], ranks = [1, 2, 3, 4]) defines
  x_test_bin     the cc_binary (link //tests:mpi_test_main for an MPI-initialising gtest main),
  x_test_np{N}   one sh_test per world size N, running tests/mpi_run.sh N x_test_bin,
  x_test         a test_suite of all of them.
The tests are tagged "mpi" and "exclusive" (one at a time: ranks oversubscribe the cores).
"""

def mpi_test(name, srcs, deps = [], ranks = [1, 2, 3, 4], args = [], data = [], size = "medium",
             tags = [], **kwargs):
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs,
        deps = deps,
        testonly = True,
        **kwargs
    )
    tests = []
    for n in ranks:
        t = "%s_np%d" % (name, n)
        native.sh_test(
            name = t,
            srcs = ["//tests:mpi_run.sh"],
            args = [str(n), "$(location :%s_bin)" % name] + args,
            data = [":%s_bin" % name] + data,
            size = size,
            tags = ["mpi", "exclusive"] + tags,
        )
        tests.append(":" + t)
    native.test_suite(name = name, tests = tests, tags = tags)
