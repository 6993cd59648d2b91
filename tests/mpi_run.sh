#!/usr/bin/env bash
# Runs a binary under real mpirun with N ranks on this machine:  mpi_run.sh N BINARY [ARGS...]
# or an MPMD launch with mpirun's own syntax (ranks started with different arguments):
#   mpi_run.sh --mpmd -np 1 BINARY ARGS... : -np 1 BINARY OTHER_ARGS...
# Used by the mpi_test macro (tests/mpi_test.bzl) and by tools/test.sh.
set -euo pipefail
mpmd=0
if [ "$1" = "--mpmd" ]; then
  mpmd=1; shift
else
  n="$1"; shift
  bin="$1"; shift
fi
MPIRUN="${MPIRUN:-$(command -v mpirun || true)}"
if [ -z "$MPIRUN" ]; then
  echo "mpi_run.sh: mpirun not found on PATH (install openmpi-bin: tools/setup.sh)" >&2
  exit 1
fi
args=(--oversubscribe --bind-to none --tag-output)
# OpenMPI refuses root unless told; CI and containers run as root.
[ "$(id -u)" = 0 ] && args=(--allow-run-as-root "${args[@]}")
# Shared-memory transport without cross-memory-attach (often blocked in containers).
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader,tcp}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_btl_tcp_if_include="${OMPI_MCA_btl_tcp_if_include:-lo}"
export OMPI_MCA_oob_tcp_if_include="${OMPI_MCA_oob_tcp_if_include:-lo}"
if [ $mpmd = 1 ]; then
  exec timeout "${MPI_TEST_TIMEOUT:-600}" "$MPIRUN" "${args[@]}" "$@"
fi
exec timeout "${MPI_TEST_TIMEOUT:-600}" "$MPIRUN" "${args[@]}" -np "$n" "$bin" "$@"
