"""When a measured profile's timings are too noisy to plan from (`meshplan profile` warns).

The profiler times every layer kind `repeats` times and stores, per timing, its relative
spread (p75 - p25) / median (`profiler.timing.summarize` -> `LayerCost.spread`, keys such as
`fw_s`, `bw_weight_s`, `recompute_full_s`). A timing with a wide spread means the machine was
busy or the layer too short to time; the median the planner uses may then be far off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.specs import LayerCost, ModelProfile

# The median each spread key belongs to (the LayerCost field the planner reads).
MEDIANS: dict[str, Callable[[LayerCost], float | None]] = {
    "fw_s": lambda c: c.fw_s,
    "bw_s": lambda c: c.bw_s,
    "bw_input_s": lambda c: c.bw_input_s,
    "bw_weight_s": lambda c: c.bw_weight_s,
    "recompute_selective_s": lambda c: c.recompute_s.selective,
    "recompute_full_s": lambda c: c.recompute_s.full,
    "split_bw_input_s": lambda c: c.split_bw_input_s,
    "split_bw_weight_s": lambda c: c.split_bw_weight_s,
}


@dataclass(frozen=True)
class SpreadLimits:
    """When `meshplan profile` calls a profile unreliable.

    max_spread: a timing whose relative inter-quartile spread exceeds this (0.25: the middle
        half of the rounds spans more than a quarter of the median) is unreliable. On a quiet
        GPU spreads stay within a few percent; a shared CPU host reaches tens of percent.
    min_share: timings shorter than this fraction of their layer's forward + backward are not
        judged: a small difference such as the weight gradient of an embedding (B - I per
        round) has a large relative spread that barely moves a plan.
    """

    max_spread: float = 0.25
    min_share: float = 0.05


DEFAULT_LIMITS = SpreadLimits()


@dataclass(frozen=True)
class NoisyTiming:
    """One measured timing: where it was measured, its median and its relative spread."""

    tp: int
    micro_batch_size: int
    kind: str
    timing: str
    median_s: float
    spread: float


def judged_timings(
    profile: ModelProfile, limits: SpreadLimits = DEFAULT_LIMITS
) -> list[NoisyTiming]:
    """Every timing of `profile` long enough to judge (see `SpreadLimits.min_share`)."""
    judged = []
    for point in profile.points:
        for kind, cost in point.kinds.items():
            work_s = cost.fw_s + cost.bw_s
            for timing, spread in (cost.spread or {}).items():
                median = MEDIANS[timing](cost) if timing in MEDIANS else None
                if median is not None and median >= limits.min_share * work_s:
                    judged.append(
                        NoisyTiming(point.tp, point.micro_batch_size, kind, timing, median, spread)
                    )
    return judged


def noisy_timings(
    profile: ModelProfile, limits: SpreadLimits = DEFAULT_LIMITS
) -> list[NoisyTiming]:
    """The judged timings whose spread exceeds `limits.max_spread`, worst first."""
    noisy = [t for t in judged_timings(profile, limits) if t.spread > limits.max_spread]
    return sorted(noisy, key=lambda t: -t.spread)


def spread_warning(profile: ModelProfile, limits: SpreadLimits = DEFAULT_LIMITS) -> str | None:
    """One line saying how many timings are unreliable and the worst, or None."""
    noisy = noisy_timings(profile, limits)
    if not noisy:
        return None
    w = noisy[0]
    return (
        f"{len(noisy)} of {len(judged_timings(profile, limits))} timings spread more than "
        f"{limits.max_spread:.0%} (worst: {w.kind}.{w.timing} at tp={w.tp} "
        f"mbs={w.micro_batch_size}, spread {w.spread:.0%} of its median "
        f"{w.median_s * 1e3:.3g} ms): this profile is unreliable; profile on an idle machine "
        "or with more --repeats"
    )
