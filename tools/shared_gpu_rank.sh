#!/bin/sh
# shared_gpu_rank.sh GPUS COMMAND...: runs one rank of an mpirun job that has more ranks than the
# machine has GPUs (tools/gpu_check.sh). NCCL refuses two ranks of one communicator on one GPU
# when it believes they share a host ("Duplicate GPU detected"); its host identity is a hash of
# the host name unless NCCL_HOSTID is set. Each rank gets its own NCCL_HOSTID, so NCCL treats the
# ranks as separate nodes and connects them through its socket transport over loopback
# (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1), and its own CUDA_VISIBLE_DEVICES (node-local rank
# mod GPUS), so the trainer's GPU choice accepts the sharing (framework/rank_env.h LocalGpuFor:
# per-task devices). For exercising multi-rank code paths only: never for speed figures.
gpus="$1"
shift
rank="${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}"
local_rank="${OMPI_COMM_WORLD_LOCAL_RANK:-$rank}"
export NCCL_HOSTID="shardema-shared-gpu-rank-$rank"
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
export CUDA_VISIBLE_DEVICES="$((local_rank % gpus))"
exec "$@"
