"""Contention-matched timing: how much slower a layer runs when K processes share the cores.

A training run of R single-threaded ranks on a host with C cores (R > C on a small CPU box)
gives each rank only part of a core whenever more than C ranks compute at once; a profile
measured alone, with a whole core, then predicts a faster run than the host can give. Timing
each layer while other processes run is not the answer: the OS shares a core in time slices of
milliseconds, longer than one layer's forward here, so a single layer is either not interrupted
at all or interrupted for a whole slice, and its median says nothing about its share of the core.

What is measured instead is throughput, over many slices:

1. the workload -- a forward and backward of every layer of the model, one micro-batch, as a
   training step does -- runs alone for `duration_s` (mean time per iteration);
2. `copies - 1` other processes run the same workload in a loop on the same cores (same
   thread count, no pinning: the scheduler spreads them as it spreads the ranks), and the
   workload is timed again (shared);
3. alone and shared phases alternate (`rounds` shared phases, started and paused by an event;
   the other processes are spawned once); each shared phase is divided by the mean of the
   alone phases on either side of it.

`factor`, the median of those ratios, is the slowdown of compute when `copies` processes
compete for the cores (processor sharing: ~copies / cores when copies > cores, ~1 otherwise,
plus what shared caches and memory bandwidth cost). `scale_profile` multiplies every time of
a profile by it (the per-action overhead too); bytes, FLOPs and counts are untouched. Each
phase also records the thread's CPU time per iteration: `cpu_factor` (shared / alone in CPU
time) is what the copies cost each other through caches and memory bandwidth, and
`model_factor = max(1, copies / cores) * cpu_factor` is the processor-sharing model of the
same slowdown. It does not see other work on the host (which inflates `factor` only while it
runs), so `scale_profile(..., basis="model")` is the choice on a host shared with work that
will not be there during the run.

The model of the run either encodes: all R ranks compete for the cores all the time, which is
an upper bound when the pipeline leaves ranks idle (bubbles, waits), as docs/runner.md
("Contention-matched profile") discusses.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier, Event

import torch

from planner.specs import ModelProfile
from profiler.layer_source import ModelSource

__all__ = ["Contention", "measure_contention", "scale_profile"]


@dataclass(frozen=True)
class Contention:
    copies: int
    cores: int
    alone_s: float  # seconds per workload iteration alone (median of the alone phases)
    alone_before_s: float
    alone_after_s: float
    shared_s: float  # the same with `copies - 1` other processes running it (median)
    factor: float  # median over shared phases of shared / (mean of the alone phases around it)
    ratios: tuple[float, ...] = ()  # each shared phase's ratio
    # Thread CPU time per iteration shared / alone (median over phases): what sharing caches
    # and memory bandwidth costs, blind to time slicing and so to other work on the host.
    cpu_factor: float = 1.0
    # Processor sharing of `copies` CPU-bound processes on `cores` cores, times cpu_factor: the
    # slowdown the run's own ranks cause, without the host's other work at measuring time.
    model_factor: float = 1.0

    def note(self) -> str:
        return (
            f"{self.copies} processes on {self.cores} cores: measured x{self.factor:.3f}, "
            f"fw+bw of every layer {self.shared_s * 1e3:.2f} ms shared vs "
            f"{self.alone_s * 1e3:.2f} ms alone ({self.alone_before_s * 1e3:.2f} first, "
            f"{self.alone_after_s * 1e3:.2f} last); ratios "
            + ", ".join(f"{r:.3f}" for r in self.ratios)
            + f"; in CPU time x{self.cpu_factor:.3f}, processor-sharing model "
            f"x{self.model_factor:.3f}"
        )


def _workload(
    source: ModelSource, *, tp: int, mbs: int, dtype: torch.dtype, device: str, seed: int
) -> Callable[[], None]:
    """One forward + backward of every layer of the model on one micro-batch."""
    built = source.build(tp=tp, dtype=dtype, device=torch.device(device), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    x0 = built.make_input(mbs, gen).to(device)
    if x0.is_floating_point():
        x0 = x0.to(dtype)
    labels = built.make_labels(mbs, gen).to(device)
    params = [p for layer in built.layers for p in layer.module.parameters()]

    def run() -> None:
        x = x0
        for layer in built.layers:
            x = layer.module(x, labels) if layer.takes_labels else layer.module(x)
        out = x if x.dim() == 0 else x.float().square().mean()
        torch.autograd.backward(out)
        for p in params:
            p.grad = None

    return run


def _time_per_iter(run: Callable[[], None], duration_s: float) -> tuple[float, float]:
    """Wall and thread CPU seconds per iteration of `run`, over at least `duration_s`."""
    run()  # warm-up
    n, t0, c0 = 0, time.perf_counter(), time.thread_time()
    while True:
        run()
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= duration_s and n >= 3:
            return elapsed / n, (time.thread_time() - c0) / n


def _load(
    source: ModelSource,
    kwargs: dict[str, object],
    threads: int,
    ready: Barrier,
    go: Event,
    stop: Event,
) -> None:
    """A competing process: the same workload, in a loop while `go` is set, until `stop`."""
    torch.set_num_threads(threads)
    run = _workload(source, **kwargs)  # type: ignore[arg-type]
    run()
    ready.wait()
    while not stop.is_set():
        if go.wait(timeout=0.05):
            run()


def measure_contention(
    source: ModelSource,
    *,
    copies: int,
    tp: int = 1,
    micro_batch_size: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
    duration_s: float = 1.0,
    rounds: int = 3,
) -> Contention:
    """The slowdown of the model's fw+bw when `copies` processes run it on this host's cores.

    Phases of `duration_s` alternate alone, shared, alone, ... (`rounds` shared phases; the
    competing processes are started once and paused between shared phases); each shared
    phase is set against the mean of the alone phases on either side of it, and the factor is
    the median of those ratios, so that a burst of other work in one phase does not make it.
    """
    if copies < 1:
        raise ValueError(f"copies={copies} must be >= 1")
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    if device != "cpu":
        raise ValueError(f"contention is measured on cpu only (device={device!r})")
    kwargs: dict[str, object] = dict(
        tp=tp, mbs=micro_batch_size, dtype=dtype, device=device, seed=seed
    )
    run = _workload(source, **kwargs)  # type: ignore[arg-type]
    cores = len(os.sched_getaffinity(0))
    alone = [_time_per_iter(run, duration_s)]
    shared: list[tuple[float, float]] = []
    if copies > 1:
        ctx = mp.get_context("spawn")
        ready = ctx.Barrier(copies)
        go, stop = ctx.Event(), ctx.Event()
        procs = [
            ctx.Process(
                target=_load,
                args=(source, kwargs, torch.get_num_threads(), ready, go, stop),
                daemon=True,
            )
            for _ in range(copies - 1)
        ]
        for p in procs:
            p.start()
        try:
            ready.wait(timeout=300)
            for _ in range(rounds):
                go.set()
                shared.append(_time_per_iter(run, duration_s))
                go.clear()
                time.sleep(0.1)  # the others finish the iteration they are in
                alone.append(_time_per_iter(run, duration_s))
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.kill()
                    p.join()
    ratios = tuple(s / ((alone[i][0] + alone[i + 1][0]) / 2) for i, (s, _) in enumerate(shared))
    cpu = tuple(c / ((alone[i][1] + alone[i + 1][1]) / 2) for i, (_, c) in enumerate(shared))
    cpu_factor = statistics.median(cpu) if cpu else 1.0
    return Contention(
        copies=copies,
        cores=cores,
        alone_s=statistics.median(a for a, _ in alone),
        alone_before_s=alone[0][0],
        alone_after_s=alone[-1][0],
        shared_s=statistics.median(s for s, _ in shared) if shared else alone[0][0],
        factor=statistics.median(ratios) if ratios else 1.0,
        ratios=ratios,
        cpu_factor=cpu_factor,
        model_factor=max(1.0, copies / cores) * cpu_factor,
    )


def scale_profile(
    profile: ModelProfile, contention: Contention, *, basis: str = "measured"
) -> ModelProfile:
    """The profile with every time multiplied by `contention.factor` (`basis="measured"`) or
    `contention.model_factor` (`basis="model"`); the notes say which and by how much."""
    if basis not in ("measured", "model"):
        raise ValueError(f"basis={basis!r} is not 'measured' or 'model'")
    k = contention.factor if basis == "measured" else contention.model_factor
    points = tuple(
        p.model_copy(update={"kinds": {kind: c.times_scaled(k) for kind, c in p.kinds.items()}})
        for p in profile.points
    )
    notes = {
        **profile.notes,
        "contention": f"times x{k:.3f} ({basis}); {contention.note()}",
        "contention_factor": repr(k),
        "contention_copies": str(contention.copies),
        "contention_basis": basis,
    }
    # the per-action overhead is CPU work of the rank's own thread too: it shares the cores
    overhead = profile.action_overhead_s.scaled(k)
    return profile.model_copy(
        update={"points": points, "notes": notes, "action_overhead_s": overhead}
    )
