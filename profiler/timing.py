"""Wall-clock timing of one piece of work: CUDA events on GPU, `perf_counter` on CPU.

`measure(setup, run)` calls `setup()` (untimed: e.g. the forward whose backward we time),
then times `run(state)`; `warmup` rounds are discarded and the median of `repeats` rounds is
reported with its relative spread, (p75 - p25) / median (the inter-quartile range).
`measure_pairs` times two pieces of work round by round (paired samples, for differences);
`measure_chain` times two steps of one piece of work, the second on what the first returned
(a split backward's I, then its W).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

S = TypeVar("S")
T = TypeVar("T")

__all__ = ["Stat", "measure", "measure_chain", "measure_pairs", "summarize", "synchronize"]


@dataclass(frozen=True)
class Stat:
    """Median of the timed rounds (seconds) and their relative inter-quartile spread."""

    median_s: float
    spread: float
    samples_s: tuple[float, ...]


def summarize(samples_s: Sequence[float]) -> Stat:
    if not samples_s:
        raise ValueError("no samples to summarize")
    med = statistics.median(samples_s)
    if len(samples_s) >= 2:
        q1, _, q3 = statistics.quantiles(samples_s, n=4, method="inclusive")
        spread = (q3 - q1) / med if med > 0 else 0.0
    else:
        spread = 0.0
    return Stat(median_s=max(med, 0.0), spread=max(spread, 0.0), samples_s=tuple(samples_s))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(device: torch.device, run: Callable[[S], object], state: S) -> float:
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        torch.cuda.synchronize(device)
        start.record()
        run(state)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3  # ms -> s
    t0 = time.perf_counter()
    run(state)
    return time.perf_counter() - t0


def measure(
    setup: Callable[[], S],
    run: Callable[[S], object],
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
) -> Stat:
    """Median and spread of `run(setup())` over `repeats` rounds after `warmup` rounds."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    samples: list[float] = []
    for i in range(warmup + repeats):
        state = setup()
        synchronize(device)
        elapsed = _time_once(device, run, state)
        del state
        if i >= warmup:
            samples.append(elapsed)
    return summarize(samples)


def measure_pairs(
    setup: Callable[[], S],
    first: Callable[[S], object],
    second: Callable[[S], object],
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
) -> tuple[list[float], list[float]]:
    """Time `first(setup())` and `second(setup())` alternately, round by round (paired
    samples, so that a difference of the two is taken under the same machine conditions)."""
    a: list[float] = []
    b: list[float] = []
    for i in range(warmup + repeats):
        s1 = setup()
        synchronize(device)
        t1 = _time_once(device, first, s1)
        del s1
        s2 = setup()
        synchronize(device)
        t2 = _time_once(device, second, s2)
        del s2
        if i >= warmup:
            a.append(t1)
            b.append(t2)
    return a, b


def measure_chain(
    setup: Callable[[], S],
    first: Callable[[S], T],
    second: Callable[[T], object],
    *,
    device: torch.device,
    repeats: int,
    warmup: int,
) -> tuple[list[float], list[float]]:
    """Per round: `r = first(setup())` timed, then `second(r)` timed (two steps of one piece of
    work, the second on what the first returned: a split backward's I, then its W)."""
    a: list[float] = []
    b: list[float] = []
    box: list[T] = []  # what `first` returned, for `second`

    def run_first(s: S) -> None:
        box.append(first(s))

    for i in range(warmup + repeats):
        state = setup()
        synchronize(device)
        t1 = _time_once(device, run_first, state)
        del state
        synchronize(device)
        t2 = _time_once(device, second, box.pop())
        if i >= warmup:
            a.append(t1)
            b.append(t2)
    return a, b
