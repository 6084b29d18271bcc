"""Inputs and outputs of the schedule simulator (the interface the cost model relies on)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.schedules.ir import Action


@dataclass(frozen=True)
class StageDurations:
    """Per-stage durations of one micro-batch, seconds.

    `bw_s` is the full backward B (with any recompute); for split schedules (zb-h1, zbv)
    the input-gradient action I takes `bw_s - w_s` and the weight-gradient action W `w_s`.
    `p2p_s[i]` is the transfer time across the boundary between stage i and stage i + 1
    (activations forward, gradients backward); the simulator ignores it where both stages
    sit on the same rank.
    """

    fw_s: tuple[float, ...]
    bw_s: tuple[float, ...]
    w_s: tuple[float, ...]
    p2p_s: tuple[float, ...]


@dataclass(frozen=True)
class TimedAction:
    action: Action
    start_s: float
    end_s: float


@dataclass(frozen=True)
class SimResult:
    step_time_s: float  # makespan: first action start (0) to last action end
    timeline: tuple[tuple[TimedAction, ...], ...]  # per rank, in execution order
    busy_s: tuple[float, ...]  # per rank
    bubble_fraction: float  # sum over ranks of idle time / (pp * step_time_s)
    peak_inflight: tuple[int, ...]  # per stage, see planner.schedules.peak_inflight
