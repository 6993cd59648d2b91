"""Shared pieces of the PyTorch FSDP2 peers of the step benchmarks (bench/peer/torch_fsdp2_*.py).

A peer builds its model, wraps it with FSDP2 (`fully_shard`, parameters sharded 1/W) and hands
`train_loop` a closure computing the local loss; this module does what every shardema training
step does besides the model, the same for every peer:
  - the process group: gloo on CPU, --world processes spawned with torch.multiprocessing,
    torch.set_num_threads(--threads) per rank;
  - one step: zero_grad, forward/backward of the local batch (its mean loss: the ranks'
    batches are equal and FSDP2/DDP average the gradients), the loss all-reduced, the global gradient norm
    (clip_grad_norm_ with an infinite max: computed, read on the host, nothing clipped), AdamW
    (fused, else foreach) on the shards, and --ema EMA copies of the shards updated with
    torch._foreach_lerp_ (decay 0.999);
  - timing: after a barrier, wall and process CPU time of each step; the median over the timed
    steps, the slowest rank's;
  - one JSON line from rank 0: {"world", "step_ms", "cpu_ms", "peak_rss_mib" (per rank,
    getrusage maxrss), "base_rss_mib" (per rank, after `import torch` and the process group,
    before the model), "state_bytes_per_rank" (parameter + AdamW + EMA shards), "params", "torch", "blas", "adamw",
    "wrap"} plus the peer's own fields.
Falls back to DDP (full replicas) when fully_shard is missing or fails on this build ("wrap":
"ddp").
"""
import json
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def blas_name():
    cfg = torch.__config__.show()
    for name in ("mkl", "openblas", "blis"):
        if ("BLAS_INFO=" + name) in cfg or ("USE_" + name.upper() + "=ON") in cfg:
            return name
    return "unknown"


def add_common_flags(p):
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ema", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=29533)


def spawn(worker, args):
    """Runs worker(rank, args) on --world gloo ranks."""
    if args.batch % args.world:
        raise SystemExit("--batch %d is not divisible by --world %d" % (args.batch, args.world))
    mp.spawn(_entry, args=(worker, args), nprocs=args.world, join=True)


_base_rss_mib = 0.0


def current_rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0**20


def _entry(rank, worker, args):
    global _base_rss_mib
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(max(1, args.threads))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    _base_rss_mib = current_rss_mib()
    try:
        worker(rank, args)
    finally:
        dist.destroy_process_group()


def shard(model, units):
    """fully_shard each module of `units`, then the root; DDP when FSDP2 is unavailable.
    Returns (the wrapped model, "fsdp2" or "ddp"). The mesh is named "cpu": without one,
    fully_shard takes the accelerator's device type and moves the shards to a visible GPU."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for m in units:
            fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, "fsdp2"
    except (ImportError, RuntimeError, ValueError, NotImplementedError):
        return torch.nn.parallel.DistributedDataParallel(model), "ddp"


def make_adamw(groups, **kw):
    try:
        return torch.optim.AdamW(groups, fused=True, **kw), "fused"
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


def _local(p):
    return p.to_local() if hasattr(p, "to_local") else p.detach()


def train_loop(rank, args, model, params, opt, local_loss, extra):
    """Runs --warmup + --steps steps of local_loss() (the local mean loss) and prints the JSON line on rank 0 (see the module's doc)."""
    shards = [_local(p) for p in params]
    emas = [[s.detach().clone() for s in shards] for _ in range(args.ema)]
    walls, cpus = [], []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        loss = local_loss()
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        norm.item()
        opt.step()
        with torch.no_grad():
            for e in emas:
                torch._foreach_lerp_(e, [_local(p) for p in params], 1.0 - 0.999)
        t, c = time.perf_counter() - t0, time.process_time() - c0
        if step >= args.warmup:
            walls.append(t)
            cpus.append(c)
    med = torch.tensor([statistics.median(walls), statistics.median(cpus)])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    rss = torch.zeros(2, args.world)
    rss[0, rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    rss[1, rank] = _base_rss_mib
    dist.all_reduce(rss)
    # Unique parameters (a tied weight counts once, as params() lists it once).
    n = sum(p.numel() for p in params)
    local_n = sum(s.numel() for s in shards)
    if rank == 0:
        out = {"world": args.world, "step_ms": med[0].item() * 1e3, "cpu_ms": med[1].item() * 1e3,
               "peak_rss_mib": [round(v, 1) for v in rss[0].tolist()],
               "base_rss_mib": [round(v, 1) for v in rss[1].tolist()],
               "state_bytes_per_rank": 4 * local_n * (3 + args.ema), "params": n,
               "torch": torch.__version__, "blas": blas_name()}
        out.update(extra)
        print(json.dumps(out), flush=True)
