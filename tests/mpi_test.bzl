"""mpi_test: a C++ test binary run under real `mpirun` at several world sizes.

mpi_test(name = "x_test", deps = [...], ranks = [1, 2, 3, 4]) defines
  x_test_bin     the cc_binary of srcs (default ["x_test.cc"]), linked with `main` (default
                 //tests:mpi_test_main, an MPI-initialising gtest main, and gtest; main = None:
                 the test brings its own main and deps),
  x_test_np{N}   one sh_test per world size N, running tests/mpi_run.sh N x_test_bin,
  x_test         a test_suite of all of them.
The tests are tagged "mpi" and "exclusive" (one at a time: ranks oversubscribe the cores).
one_process_per_case = True runs each gtest case in its own mpirun (tests/mpi_run_each.sh): for
tests whose cases end in an injected failure, after which a process may only abort.
progress_thread_ranks = [2, 3] also runs the same binary with --world_progress_thread (the shared
world's CommOptions::progress_thread, tests/test_world.h) at those world sizes:
x_test_progress_thread_np{N}, in the same test_suite, tagged "threads" (ThreadSanitizer).
Each run sets MPI_TEST_TIMEOUT a little below Bazel's timeout for `size`, so a hung collective is
killed by mpi_run.sh (which kills every rank) before Bazel kills the test.
"""

# Bazel's default timeout per test size, minus a margin for mpirun to tear the ranks down.
_MPI_TIMEOUT = {"small": 50, "medium": 280, "large": 870, "enormous": 3570}

_MAIN = "//tests:mpi_test_main"

def mpi_test(name, srcs = None, deps = [], ranks = [1, 2, 3, 4], args = [], data = [],
             size = "medium", tags = [], one_process_per_case = False, progress_thread_ranks = [],
             main = _MAIN, **kwargs):
    native.cc_binary(
        name = name + "_bin",
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = deps + ([main, "@system_usr//:gtest"] if main else []),
        testonly = True,
        **kwargs
    )
    tests = []
    runs = [(n, "", []) for n in ranks]
    runs += [(n, "_progress_thread", ["--world_progress_thread"]) for n in progress_thread_ranks]
    for n, suffix, extra in runs:
        t = "%s%s_np%d" % (name, suffix, n)
        native.sh_test(
            name = t,
            srcs = ["//tests:mpi_run_each.sh" if one_process_per_case else "//tests:mpi_run.sh"],
            args = [str(n), "$(location :%s_bin)" % name] + args + extra,
            data = [":%s_bin" % name] + data + (["//tests:mpi_run.sh"] if one_process_per_case else []),
            size = size,
            # Per mpirun: each case's own limit is a small test's when run one per process.
            env = {"MPI_TEST_TIMEOUT": str(_MPI_TIMEOUT["small" if one_process_per_case else size])},
            # The progress thread's runs also go to tools/test.sh --sanitize's ThreadSanitizer.
            tags = ["mpi", "exclusive"] + tags + (["threads"] if suffix else []),
        )
        tests.append(":" + t)
    native.test_suite(name = name, tests = tests, tags = tags)
