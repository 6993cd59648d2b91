#!/usr/bin/env bash
# gpu_package.sh: tools/gpu_check.sh --package, sourced by gpu_check.sh in the repository only
# (a package never needs it): package DIR builds the CUDA binaries and copies them, their
# libraries, the OpenMPI runtime, the peers and the scripts into DIR, then packs DIR.tar.gz
# (gpu_check.sh's header says what a package holds). Uses gpu_check.sh's $here, die and
# with_cuda_libs.
# shellcheck disable=SC2154  # with_cuda_libs, here: set by gpu_check.sh

# Shared libraries every Linux machine has (glibc) or that must come from the GPU machine (the
# driver); never copied.
SYSTEM_LIBS='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libutil|libcuda|libnvidia-[a-z-]+)\.so'
BIG_CUDA_LIBS='^(libnccl|libcublas|libcublasLt)\.so'
CARRY_LIMIT=$((64 * 1048576))  # the device's limit on what travels with a run (bytes)

copy_libs_of() {  # $1: ELF file; copies the libraries it resolves (not SYSTEM_LIBS) into $lib
  local name path
  while read -r name path; do
    [ -n "$path" ] && [ -f "$path" ] || continue
    [[ "$name" =~ $SYSTEM_LIBS ]] && continue
    if [[ "$name" =~ $BIG_CUDA_LIBS ]] && [ "$with_cuda_libs" = 0 ]; then continue; fi
    [ -e "$lib/$name" ] || cp -L "$path" "$lib/$name"
  done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
}

ompi_path() {  # $1: an ompi_info --path name (pkglibdir, pkgdatadir, sysconfdir, bindir)
  ompi_info --path "$1" --parsable 2>/dev/null | sed -n 's/^path:[^:]*:\(.*\)$/\1/p' | head -1
}

package() {
  local dir="$1"
  cd "$here/.." || die "no repository above $here"
  [ -f WORKSPACE ] || die "--package runs in the repository (tools/gpu_check.sh)"
  command -v nvcc >/dev/null 2>&1 || [ -n "${CUDA_PATH:-}" ] || die "--package needs nvcc"
  command -v ompi_info >/dev/null 2>&1 || die "--package needs an OpenMPI install (ompi_info)"
  local BAZEL=(bazel)
  [ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")

  local gpu='attr(tags, "\bgpu\b", tests(//...))'
  local singles mpibins datafiles
  singles=$("${BAZEL[@]}" query "kind(cc_test, $gpu)" 2>/dev/null) || die "bazel query failed"
  mpibins=$("${BAZEL[@]}" query "kind(cc_binary, labels(data, kind(sh_test, $gpu)))" 2>/dev/null)
  datafiles=$("${BAZEL[@]}" query "kind('source file', labels(data, $gpu))" 2>/dev/null)
  local tools="//examples:train_mlp //examples:train_gpt //bench:gpu_optimizer_bench"
  echo "== bazel build --config=cuda ($(echo $singles $mpibins | wc -w) test binaries, $tools)"
  # shellcheck disable=SC2086
  "${BAZEL[@]}" build --config=cuda $singles $mpibins $tools || die "the CUDA build failed"
  local bin_root
  bin_root=$("${BAZEL[@]}" info --config=cuda bazel-bin 2>/dev/null) || die "bazel info failed"

  rm -rf "$dir" "$dir.tar.gz" && mkdir -p "$dir"/{bin,lib,root,mpi/bin,mpi/lib,mpi/share,mpi/etc} || die "mkdir $dir"
  dir="$(cd "$dir" && pwd)"
  lib="$dir/lib"
  local manifest="$dir/MANIFEST" label name path
  : > "$manifest"
  add_bin() {  # $1: label, $2: kind
    label="$1"
    path="$bin_root/$(echo "${label#//}" | tr ':' '/')"
    name="${label##*:}"
    [ -e "$dir/bin/$name" ] && die "two binaries named $name"
    cp -L "$path" "$dir/bin/$name" && chmod u+w "$dir/bin/$name" || die "copy $path"
    copy_libs_of "$path"
    echo "$2 $name $label" >> "$manifest"
  }
  for label in $singles; do add_bin "$label" single; done
  for label in $mpibins; do add_bin "$label" mpi; done
  add_bin //examples:train_mlp tool
  add_bin //examples:train_gpt tool
  add_bin //bench:gpu_optimizer_bench tool
  # --step-bench's binaries, built without CUDA: the CPU tables' own build, without the CUDA
  # libraries in their RSS.
  local cpu_root
  "${BAZEL[@]}" build //examples:train_mlp //bench:step_roofline //bench:save_floor ||
    die "the CPU build failed"
  cpu_root=$("${BAZEL[@]}" info bazel-bin 2>/dev/null) || die "bazel info failed"
  mkdir -p "$dir/cpu"
  for path in "$cpu_root/examples/train_mlp" "$cpu_root/bench/step_roofline" \
    "$cpu_root/bench/save_floor"; do
    cp -L "$path" "$dir/cpu/" && chmod u+w "$dir/cpu/$(basename "$path")" || die "copy $path"
    copy_libs_of "$path"
  done
  for label in $datafiles; do  # //pkg:path/in/pkg -> root/pkg/path/in/pkg
    path="$(echo "${label#//}" | sed 's#:#/#')"
    mkdir -p "$dir/root/$(dirname "$path")" && cp -L "$path" "$dir/root/$path" || die "copy $path"
  done

  # The OpenMPI runtime of this machine, relocated by env.sh.
  local pkglibdir pkgdatadir sysconfdir bindir pmixlib
  pkglibdir=$(ompi_path pkglibdir)
  pkgdatadir=$(ompi_path pkgdatadir)
  sysconfdir=$(ompi_path sysconfdir)
  bindir=$(ompi_path bindir)
  [ -d "$pkglibdir" ] && [ -x "$bindir/orterun" ] || die "OpenMPI's pkglibdir/orterun not found"
  cp -L "$bindir/orterun" "$dir/mpi/bin/mpirun"
  for t in orted ompi_info; do cp -L "$bindir/$t" "$dir/mpi/bin/$t"; done
  mkdir -p "$dir/mpi/lib/openmpi"
  # MCA components, without those for network hardware (UCX, libfabric, verbs, PSM): a package
  # runs on one node over shared memory and loopback TCP.
  local c
  for c in "$pkglibdir"/*.so; do
    case "$(basename "$c")" in *_ucx*|*_ofi*|*_openib*|*_psm*|*_verbs*|*_portals*|*_cuda*) continue ;; esac
    cp -L "$c" "$dir/mpi/lib/openmpi/"
    copy_libs_of "$c"
  done
  cp -rL "$pkgdatadir" "$dir/mpi/share/openmpi"
  cp -L "$sysconfdir/openmpi-mca-params.conf" "$dir/mpi/etc/" 2>/dev/null || : > "$dir/mpi/etc/openmpi-mca-params.conf"
  for t in "$dir"/mpi/bin/*; do copy_libs_of "$t"; done
  # External PMIx (Debian's OpenMPI): its components and help files, relocated by env.sh.
  # libpmix comes in through the pmix MCA component, not mpirun itself.
  pmixlib=$(ldd "$dir/mpi/bin/mpirun" "$dir"/mpi/lib/openmpi/mca_pmix_*.so 2>/dev/null |
    awk '$1 ~ /^libpmix\.so/ {print $3; exit}')
  if [ -n "$pmixlib" ]; then
    local pmixroot
    pmixroot=$(cd "$(dirname "$(readlink -f "$pmixlib")")/.." && pwd)
    mkdir -p "$dir/mpi/pmix/lib" "$dir/mpi/pmix/share"
    [ -d "$pmixroot/lib/pmix" ] && cp -rL "$pmixroot/lib/pmix" "$dir/mpi/pmix/lib/"
    [ -d "$pmixroot/share/pmix" ] && cp -rL "$pmixroot/share/pmix" "$dir/mpi/pmix/share/"
    for c in "$dir"/mpi/pmix/lib/pmix/*.so; do [ -e "$c" ] && copy_libs_of "$c"; done
  fi
  chmod -R u+w "$dir"
  strip --strip-unneeded "$dir"/bin/* "$dir"/cpu/* "$lib"/*.so* "$dir"/mpi/lib/openmpi/*.so \
    2>/dev/null

  cp "$self" "$dir/gpu_check.sh" && cp "$here/test_results.sh" "$dir/test_results.sh" &&
    cp "$here/shared_gpu_rank.sh" "$dir/shared_gpu_rank.sh" || die "copy the scripts"
  if [ -f "$here/gpu_session.sh" ]; then  # the session's one script, inside the archive too
    cp "$here/gpu_session.sh" "$dir/gpu_session.sh" && chmod +x "$dir/gpu_session.sh" ||
      die "copy gpu_session.sh"
  fi
  cp bench/peer/torch_fused_adamw.py "$dir/torch_fused_adamw.py" || die "copy the PyTorch peer"
  # The step benchmarks' peers, in the repository's layout (the GPT peer imports
  # examples/testdata/gpt_torch.py by its path relative to bench/peer).
  mkdir -p "$dir/peer/bench/peer" "$dir/peer/examples/testdata" &&
    cp bench/peer/fsdp2_step.py bench/peer/torch_fsdp2_mlp.py bench/peer/torch_fsdp2_gpt.py \
      "$dir/peer/bench/peer/" && cp examples/testdata/gpt_torch.py "$dir/peer/examples/testdata/" &&
    cp bench/step_bench.sh bench/save_stall_bench.sh bench/bench_lib.sh "$dir/peer/bench/" \
      || die "copy the FSDP2 peers"
  # The GPU GPT benchmark (check 3d), in the same layout: its peer imports gpt_torch.py and
  # gpt_flops.py by their paths; it and check 3e's driver source gpt_driver_lib.sh beside them.
  if ! cp bench/gpu_gpt_bench.sh bench/gpt_driver_lib.sh "$dir/peer/bench/" ||
     ! cp bench/peer/torch_gpt_gpu.py bench/peer/gpt_flops.py bench/peer/gpu_peer_lib.py \
       "$dir/peer/bench/peer/"; then
    die "copy the GPU GPT benchmark"
  fi
  # The train_mlp step's PyTorch peer (check 3c): it imports gpu_peer_lib.py beside it.
  cp bench/peer/torch_mlp_gpu.py "$dir/peer/bench/peer/" || die "copy the GPU MLP peer"
  # The GPT autocast parity check (check 3e): its peer imports gpt_torch.py, gpt_flops.py and
  # safetensors_io.py by their paths.
  if ! cp bench/gpt_autocast_parity.sh "$dir/peer/bench/" ||
     ! cp bench/peer/torch_gpt_parity.py "$dir/peer/bench/peer/" ||
     ! cp examples/testdata/safetensors_io.py "$dir/peer/examples/testdata/"; then
    die "copy the GPT autocast parity check"
  fi
  chmod +x "$dir/gpu_check.sh"
  write_env "$dir/env.sh"
  {
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
    echo "openmpi: $(ompi_info --parsable --version 2>/dev/null | head -1)"
  } > "$dir/BUILD_INFO"
  # What travels: the folder as one gzip archive (the CUDA binaries' fat binaries, SASS and PTX,
  # pack about 3:1), which must fit the device's carry limit.
  local bytes packed archive="$dir.tar.gz" base
  base=$(basename "$dir")
  bytes=$(du -sb "$dir" | cut -f1)
  tar -czf "$archive" -C "$(dirname "$dir")" "$base" || die "tar $archive"
  packed=$(stat -c %s "$archive")
  echo "== package: $dir ($((bytes / 1048576)) MiB, $(grep -c . "$manifest") binaries); it" \
    "travels as $archive: $((packed / 1048576)) MiB ($packed bytes) of the device's 64 MiB" \
    "carry limit"
  if [ "$packed" -gt "$CARRY_LIMIT" ]; then
    {
      echo "gpu_check: $archive is $packed bytes, OVER the device's carry limit of" \
        "$CARRY_LIMIT bytes (64 MiB): it cannot travel. The package's largest files:"
      find "$dir" -type f -printf '%s %P\n' | sort -rn | head -12 | sed 's/^/  /'
    } >&2
    [ "$with_cuda_libs" = 1 ] || exit 2  # --with-cuda-libs packages are for other machines
  fi
  echo "   on a GPU machine: tar -xzf $base.tar.gz && $base/gpu_check.sh"
}

write_env() {
  cat > "$1" <<'EOF'
# Sourced by gpu_check.sh: the package's OpenMPI and libraries, wherever the folder lies.
pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export OPAL_PREFIX="$pkg/mpi"
export OPAL_EXEC_PREFIX="$pkg/mpi" OPAL_BINDIR="$pkg/mpi/bin" OPAL_LIBDIR="$pkg/lib"
export OPAL_PKGLIBDIR="$pkg/mpi/lib/openmpi" OPAL_DATAROOTDIR="$pkg/mpi/share"
export OPAL_DATADIR="$pkg/mpi/share" OPAL_PKGDATADIR="$pkg/mpi/share/openmpi"
export OPAL_SYSCONFDIR="$pkg/mpi/etc" OPAL_LIBEXECDIR="$pkg/mpi/bin"
export PMIX_INSTALL_PREFIX="$pkg/mpi/pmix" PMIX_MCA_mca_base_component_path="$pkg/mpi/pmix/lib/pmix"
export OMPI_MCA_mca_base_component_path="$pkg/mpi/lib/openmpi"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader,tcp}" OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_btl_tcp_if_include="${OMPI_MCA_btl_tcp_if_include:-lo}"
export OMPI_MCA_oob_tcp_if_include="${OMPI_MCA_oob_tcp_if_include:-lo}"
export HWLOC_COMPONENTS="${HWLOC_COMPONENTS:--cuda,-nvml,-opencl,-rsmi,-levelzero}"
# NCCL and cuBLAS: the package's lib/ when it has them, else the machine's.
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/lib/x86_64-linux-gnu /usr/lib64 \
         /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
         "$HOME"/.local/lib/python3*/site-packages/nvidia/*/lib \
         /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
         $(python3 -c 'import site; print(" ".join(p + "/nvidia/*/lib" for p in site.getsitepackages()))' 2>/dev/null); do
  [ -d "$d" ] && ls "$d" 2>/dev/null | grep -qE '^lib(nccl|cublas|cublasLt)\.so' && cuda_dirs="$cuda_dirs:$d"
  # cuDNN 9 (PyTorch's): the GPU attention opens it at run time (nn/cuda/cudnn_attention.h).
  if [ -z "${SHARDEMA_CUDNN_LIBRARY:-}" ] && [ -f "$d/libcudnn.so.9" ]; then
    export SHARDEMA_CUDNN_LIBRARY="$d/libcudnn.so.9"
    cuda_dirs="$cuda_dirs:$d"
  fi
done
export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$cuda_dirs"
export PATH="$pkg/mpi/bin:$PATH"
unset cuda_dirs d
EOF
}
