#!/usr/bin/env bash
# Installs exactly the Debian packages shardema needs, only those that are missing. Idempotent.
# Optional Python packages (the real safetensors reader, numpy) are installed with pip when
# possible; their absence only makes the tests that use them skip.
#   tools/setup.sh          install what is missing
#   tools/setup.sh --check  only report what is missing (exit 1 if something is)
set -euo pipefail

PACKAGES=(
  bazel-bootstrap      # Bazel 4.2.3, the build
  g++                  # C++17 compiler
  openmpi-bin          # mpirun
  libopenmpi-dev       # MPI headers and libraries
  libeigen3-dev        # Eigen (trainer GEMMs on CPU)
  libgtest-dev         # GoogleTest
  libgmock-dev         # GoogleMock
  libbenchmark-dev     # Google Benchmark
  nlohmann-json3-dev   # JSON (manifests, safetensors headers)
  libcli11-dev         # command-line parsing
  libxxhash-dev        # checksums
  gnuplot-nox          # loss curves in tools/demo.sh
  python3-sklearn      # its breast-cancer CSV: the data of examples/autoencoder
)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
elif [ $check_only = 1 ]; then
  echo "setup: missing Debian packages: ${missing[*]}"
  exit 1
else
  echo "setup: installing missing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  if ! $SUDO apt-get update -qq; then
    echo "setup: 'apt-get update' failed: is Debian's package mirror reachable?" >&2
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/shardema-apt.log 2>&1; then
    echo "setup: 'apt-get install ${missing[*]}' failed; last lines of /tmp/shardema-apt.log:" >&2
    tail -20 /tmp/shardema-apt.log >&2
    exit 1
  fi
  echo "setup: installed ${missing[*]}"
fi

# Optional Debian packages: a failed install is not an error (what needs them is reported as
# skipped). optional_apt WHAT PACKAGE...: installs the packages, or with --check only says so.
optional_apt() {
  local what="$1"
  shift
  if [ $check_only = 1 ]; then
    echo "setup: optional $* ($what) missing"
  elif [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; then
    local sudo=""
    [ "$(id -u)" != 0 ] && sudo=sudo
    if DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" \
        >>/tmp/shardema-apt.log 2>&1; then
      echo "setup: installed $* ($what)"
    else
      echo "setup: could not install $*: $what will be skipped"
    fi
  fi
}
# clang with libFuzzer for tools/fuzz.sh and clang-format for tools/check_format.sh.
if ! command -v clang++ >/dev/null 2>&1 || ! command -v clang-format >/dev/null 2>&1; then
  optional_apt "the fuzz run and the format check" clang clang-format
fi
# Debian's PyTorch for the PyTorch interop tests (examples/autoencoder's strict load).
/usr/bin/python3 -c "import torch" 2>/dev/null || optional_apt "the PyTorch interop tests" python3-torch

if command -v nvcc >/dev/null 2>&1; then
  echo "setup: CUDA toolkit found: $(command -v nvcc) (the CUDA path will be compiled)"
  # cuDNN's header-only C++ frontend (the GPU attention's cuDNN path, nn/cuda/cudnn_attention.h),
  # from its PyPI wheel into .deps/ (git-ignored; third_party/system_libs.bzl looks there).
  # Without it the CUDA build compiles that path out and the attention uses its own kernels.
  fe_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn_frontend"
  fe_version=$(cat "$(dirname "$0")/../third_party/cudnn_frontend.version")
  if [ ! -f "$fe_dir/$fe_version/include/cudnn_frontend.h" ]; then
    if [ $check_only = 1 ]; then
      echo "setup: optional cuDNN frontend $fe_version headers missing (.deps/cudnn_frontend)"
    else
      fe_tmp=$(mktemp -d)
      if python3 -m pip download -q --no-deps "nvidia-cudnn-frontend==$fe_version" -d "$fe_tmp" \
          >/tmp/shardema-pip.log 2>&1 &&
         mkdir -p "$fe_dir/$fe_version" &&
         python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith("include/")]' \
          "$(ls "$fe_tmp"/*.whl | head -1)" "$fe_dir/$fe_version"; then
        echo "setup: cuDNN frontend $fe_version headers in .deps/cudnn_frontend"
      else
        rm -rf "${fe_dir:?}/$fe_version"
        echo "setup: could not fetch nvidia-cudnn-frontend==$fe_version (see /tmp/shardema-pip.log): the CUDA build leaves out the cuDNN attention path"
      fi
      rm -rf "$fe_tmp"
    fi
  fi
else
  echo "setup: no nvcc on PATH: CPU-only build (set PATH or CUDA_PATH to build the CUDA path)"
fi

# Optional: the reference safetensors reader for export checks.
PY="${SHARDEMA_PYTHON:-python3}"
if command -v "$PY" >/dev/null 2>&1; then
  if ! "$PY" -c "import safetensors, numpy" 2>/dev/null; then
    [ $check_only = 1 ] && { echo "setup: optional python packages safetensors/numpy missing"; exit 0; }
    echo "setup: installing python packages safetensors numpy (optional)"
    "$PY" -m pip install -q safetensors numpy >/tmp/shardema-pip.log 2>&1 ||
      echo "setup: pip install safetensors numpy failed (see /tmp/shardema-pip.log); export checks with the reference reader will skip"
  fi
fi
exit 0
