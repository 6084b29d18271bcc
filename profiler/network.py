"""Network profiler: collective bandwidth and latency -> the link figures of a ClusterSpec.

Run one process per GPU (or CPU rank) under torchrun:

    torchrun --nproc-per-node 8 [--nnodes N ...] -m profiler.network [-o network.json]

Backend: NCCL when CUDA is available, else gloo (`--backend` overrides). For every message size
it times all-reduce, all-gather, reduce-scatter and send/recv (a ping-pong between rank pairs)
within a node (the ranks sharing a node) and across nodes (one rank per node), and reports
bus bandwidth as NCCL tests define it (nccl-tests doc/PERFORMANCE.md), with n ranks and
S bytes (the all-reduced buffer; all-gather's output; reduce-scatter's input):
    algbw = S / t;  all-reduce busbw = algbw * 2(n-1)/n;
    all-gather and reduce-scatter busbw = algbw * (n-1)/n;  send/recv busbw = algbw.
A time is the slowest rank's (max over ranks) mean over `iters` back-to-back calls, median over
`repeats` rounds. Latency is the one-way send/recv time of the smallest message.

Link figures: `intra_node_gbps` / `inter_node_gbps` = the highest all-reduce bus bandwidth
measured in that scope (GB/s = 1e9 bytes/s); `*_latency_s` = the small-message send/recv time.
`--ranks-per-node K` pretends every K consecutive ranks form a node (to measure the across-node
path on one machine, e.g. in CI); by default nodes come from torchrun's LOCAL_WORLD_SIZE.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import Field

from planner.specs import ClusterSpec, Frozen
from profiler.rank_exit import exit_rank

__all__ = ["LinkFigures", "Measurement", "NetworkProfile", "bus_bandwidth", "main"]

Op = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv"]
Scope = Literal["intra_node", "inter_node"]
OPS: tuple[Op, ...] = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
CPU_SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 20)
GPU_SIZES = tuple(1 << k for k in range(10, 29, 2))  # 1 KiB .. 256 MiB


class Measurement(Frozen):
    scope: Scope
    op: Op
    ranks: int = Field(gt=1)
    size_bytes: int = Field(gt=0)
    time_s: float = Field(ge=0)
    algbw_gbps: float = Field(ge=0)
    busbw_gbps: float = Field(ge=0)


class LinkFigures(Frozen):
    """The link fields of a ClusterSpec (None where that scope was not measured)."""

    intra_node_gbps: float | None = None
    inter_node_gbps: float | None = None
    intra_node_latency_s: float | None = None
    inter_node_latency_s: float | None = None


class NetworkProfile(Frozen):
    schema_version: Literal[1] = 1
    backend: str
    world_size: int
    nnodes: int
    ranks_per_node: int
    device_name: str
    torch_version: str
    measured_at: str
    links: LinkFigures
    measurements: tuple[Measurement, ...]
    cluster: ClusterSpec | None = None

    def cluster_spec(self, *, gpu: str, num_gpus: int | None = None) -> ClusterSpec:
        """A ClusterSpec for catalog GPU `gpu` with the measured link figures."""
        fields = {k: v for k, v in self.links.model_dump().items() if v is not None}
        return ClusterSpec(
            gpu=gpu,
            num_gpus=num_gpus or self.world_size,
            gpus_per_node=self.ranks_per_node,
            **fields,
        )


def bus_bandwidth(op: Op, *, size_bytes: int, time_s: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, by nccl-tests' definitions (doc/PERFORMANCE.md)."""
    if time_s <= 0:
        return 0.0, 0.0
    alg = size_bytes / time_s / 1e9
    factor = {
        "all_reduce": 2.0 * (ranks - 1) / ranks,
        "all_gather": (ranks - 1) / ranks,
        "reduce_scatter": (ranks - 1) / ranks,
        "send_recv": 1.0,
    }[op]
    return alg, alg * factor


def link_figures(measurements: Sequence[Measurement]) -> LinkFigures:
    def best(scope: Scope) -> float | None:
        bws = [m.busbw_gbps for m in measurements if m.scope == scope and m.op == "all_reduce"]
        return max(bws) if bws and max(bws) > 0 else None

    def latency(scope: Scope) -> float | None:
        p2p = [m for m in measurements if m.scope == scope and m.op == "send_recv"]
        return min(p2p, key=lambda m: m.size_bytes).time_s if p2p else None

    return LinkFigures(
        intra_node_gbps=best("intra_node"),
        inter_node_gbps=best("inter_node"),
        intra_node_latency_s=latency("intra_node"),
        inter_node_latency_s=latency("inter_node"),
    )


class _Bench:
    """Times collectives on one process group (every rank of the world calls every method)."""

    def __init__(self, device: torch.device, iters: int, repeats: int, warmup: int) -> None:
        self.device = device
        self.iters = iters
        self.repeats = repeats
        self.warmup = warmup

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], None], group: Any, member: bool) -> float:
        """Median over rounds of the slowest member's mean time per call (0 for non-members)."""
        rounds: list[float] = []
        for r in range(self.warmup + self.repeats):
            elapsed = 0.0
            if member:
                dist.barrier(group=group)
                self._sync()
                t0 = time.perf_counter()
                for _ in range(self.iters):
                    fn()
                self._sync()
                elapsed = (time.perf_counter() - t0) / self.iters
            slowest = torch.tensor([elapsed], dtype=torch.float64, device=self.device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # world: every rank joins
            if r >= self.warmup:
                rounds.append(float(slowest.item()))
        return statistics.median(rounds)


# torch 2.13 renamed the tensor forms (the old names warn); older torch has only the old ones
_ALL_GATHER: Callable[..., Any] = getattr(dist, "all_gather_single", None) or (
    dist.all_gather_into_tensor
)
_REDUCE_SCATTER: Callable[..., Any] = getattr(dist, "reduce_scatter_single", None) or (
    dist.reduce_scatter_tensor
)


def _ops(
    op: Op, size: int, group: Any, ranks: list[int], rank: int, device: torch.device
) -> Callable[[], None]:
    n = len(ranks)
    elems = max(n, size // 4 // n * n)  # fp32 elements, divisible by n
    if op == "all_reduce":
        buf = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all_gather":
        part = torch.ones(elems // n, device=device)
        out = torch.empty(elems, device=device)
        return lambda: _ALL_GATHER(out, part, group=group)
    if op == "reduce_scatter":
        full = torch.ones(elems, device=device)
        part = torch.empty(elems // n, device=device)
        return lambda: _REDUCE_SCATTER(part, full, group=group)
    # send/recv ping-pong between pairs (0,1), (2,3), ... of the group; one-way time = half
    buf = torch.ones(elems, device=device)
    i = ranks.index(rank)
    peer = ranks[i ^ 1] if (i ^ 1) < n else None

    def ping_pong() -> None:
        if peer is None:
            return
        if i % 2 == 0:
            dist.send(buf, dst=peer)
            dist.recv(buf, src=peer)
        else:
            dist.recv(buf, src=peer)
            dist.send(buf, dst=peer)

    return ping_pong


def _scopes(world: int, per_node: int) -> list[tuple[Scope, list[list[int]]]]:
    """Groups of global ranks per scope: each node's ranks; one rank per node (local rank 0)."""
    nodes = [list(range(s, min(s + per_node, world))) for s in range(0, world, per_node)]
    scopes: list[tuple[Scope, list[list[int]]]] = []
    if per_node > 1:
        scopes.append(("intra_node", nodes))
    if len(nodes) > 1:
        scopes.append(("inter_node", [[node[0] for node in nodes]]))
    return scopes


def run(
    *,
    sizes: Sequence[int],
    ops: Sequence[Op] = OPS,
    ranks_per_node: int | None = None,
    iters: int = 5,
    repeats: int = 3,
    warmup: int = 1,
    backend: str | None = None,
    gpu: str | None = None,
) -> NetworkProfile | None:
    """Measure inside an initialised (or torchrun-provided) world; rank 0 gets the profile."""
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend)
    world, rank = dist.get_world_size(), dist.get_rank()
    if world < 2:
        raise RuntimeError(
            "the network profiler needs at least 2 ranks (torchrun --nproc-per-node 2)"
        )
    backend_name = str(dist.get_backend())
    device = torch.device("cpu")
    if backend_name == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    per_node = ranks_per_node or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    bench = _Bench(device, iters=iters, repeats=repeats, warmup=warmup)
    results: list[Measurement] = []
    for scope, groups in _scopes(world, per_node):
        handles = [(g, dist.new_group(ranks=g)) for g in groups]  # every rank creates each
        for ranks, group in handles:
            member = rank in ranks
            for op in ops:
                for size in sizes:
                    fn = _ops(op, size, group, ranks, rank, device) if member else lambda: None
                    t = bench.time(fn, group, member)
                    n = len(ranks)
                    elems = max(n, size // 4 // n * n)
                    nbytes = elems * 4
                    alg, bus = bus_bandwidth(op, size_bytes=nbytes, time_s=t, ranks=n)
                    results.append(
                        Measurement(
                            scope=scope,
                            op=op,
                            ranks=n,
                            size_bytes=nbytes,
                            time_s=t / 2 if op == "send_recv" else t,
                            algbw_gbps=alg * 2 if op == "send_recv" else alg,
                            busbw_gbps=bus * 2 if op == "send_recv" else bus,
                        )
                    )
            if len(groups) > 1:
                break  # all nodes alike: the first node's figures stand for the others
    dist.barrier()
    if rank != 0:
        return None
    links = link_figures(results)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    profile = NetworkProfile(
        backend=backend_name,
        world_size=world,
        nnodes=-(-world // per_node),
        ranks_per_node=per_node,
        device_name=name,
        torch_version=torch.__version__,
        measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        links=links,
        measurements=tuple(results),
    )
    if gpu is not None:
        profile = profile.model_copy(update={"cluster": profile.cluster_spec(gpu=gpu)})
    return profile


def _parse_sizes(text: str) -> tuple[int, ...]:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    out = []
    for item in filter(None, text.lower().split(",")):
        mult = units.get(item[-1], 1)
        out.append(int(item[:-1] if mult > 1 else item) * mult)
    return tuple(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m profiler.network", description=__doc__)
    parser.add_argument("-o", "--output", help="write the NetworkProfile JSON here (rank 0)")
    parser.add_argument("--sizes", help="message sizes, e.g. 1k,64k,1m (default by device)")
    parser.add_argument("--ops", default=",".join(OPS), help="subset of " + ",".join(OPS))
    parser.add_argument("--ranks-per-node", type=int, default=None)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None)
    parser.add_argument("--gpu", help="catalog GPU name: also emit a full ClusterSpec")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and args.backend != "gloo"
    sizes = _parse_sizes(args.sizes) if args.sizes else (GPU_SIZES if cuda else CPU_SIZES)
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad:
        parser.error(f"unknown ops {bad}; choose from {', '.join(OPS)}")
    try:
        profile = run(
            sizes=sizes,
            ops=ops,
            ranks_per_node=args.ranks_per_node,
            iters=args.iters,
            repeats=args.repeats,
            warmup=args.warmup,
            backend=args.backend,
            gpu=args.gpu,
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if profile is not None:
        doc = json.dumps(profile.model_dump(mode="json"), indent=2)
        if args.output:
            with open(args.output, "w") as fh:
                fh.write(doc + "\n")
        else:
            sys.stdout.write(doc + "\n")
    return 0


if __name__ == "__main__":
    exit_rank(main())
