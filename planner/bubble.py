"""The pipeline-bubble calculator (the seed article's calculator, done with the simulator).

`bubble_calc(BubbleRequest) -> BubbleResult` times one schedule; `bubble_table()` prints the
article's P x M table for GPipe, 1F1B and interleaved 1F1B; `smallest_microbatches()` finds the
fewest micro-batches that reach a target bubble. The REST API serves the same models at
POST /v1/bubble.

The article's formulas, corrected (DESIGN.md; Narayanan et al. 2021 §2.2): with uniform stages
GPipe and 1F1B have the *same* bubble, (p-1)/(m+p-1) of the step time; interleaving with v
chunks gives (p-1)/(v*m+p-1) when m is a multiple of p. 1F1B changes activation memory: the
first stage holds min(p, m) micro-batches instead of GPipe's m.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from planner.errors import SpecError
from planner.schedules import (
    Schedule,
    StageDurations,
    check_generate_args,
    generate,
    rank_peak_inflight,
    render_timeline_svg,
    simulate,
)
from planner.specs.base import ScheduleName

__all__ = [
    "BubbleRequest",
    "BubbleResult",
    "BubbleTable",
    "BubbleTableRow",
    "MicrobatchTarget",
    "TimelineEntry",
    "bubble_calc",
    "bubble_table",
    "closed_form_bubble",
    "default_vpp",
    "smallest_microbatches",
    "timeline_svg",
]

# Bounded so that a whole step stays finite (an action of up to 10^6 s, 16384 micro-batches,
# 64 x 1024 stages): a response never carries inf or NaN.
MAX_DURATION_S = 1e6
NonNegative = Annotated[float, Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False)]
_SPLIT: tuple[ScheduleName, ...] = ("zb-h1", "zbv")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def default_vpp(schedule: ScheduleName) -> int:
    """vpp when none is given: 2 for interleaved-1f1b and zbv, 1 otherwise."""
    return 2 if schedule in ("interleaved-1f1b", "zbv") else 1


class BubbleRequest(_Frozen):
    """One schedule to time. Per-stage values: one number (every stage) or pp * vpp numbers.

    `bw_s` is the full backward; for zero-bubble schedules (zb-h1, zbv) `w_s` is its
    weight-gradient part (I takes bw_s - w_s, W takes w_s). `p2p_s` is one number or one per
    stage boundary (pp * vpp - 1), charged where the two stages sit on different ranks.
    """

    schedule: ScheduleName
    pp: int = Field(ge=1, le=1024)
    num_microbatches: int = Field(ge=1, le=16384)
    vpp: int | None = Field(
        default=None, ge=1, le=64, validate_default=True, description="default: default_vpp()"
    )
    fw_s: tuple[NonNegative, ...]
    bw_s: tuple[NonNegative, ...]
    w_s: tuple[NonNegative, ...] = Field(default=(0.0,), validate_default=True)
    p2p_s: tuple[NonNegative, ...] = Field(default=(0.0,), validate_default=True)
    include_timeline: bool = True

    @field_validator("fw_s", "bw_s", "w_s", "p2p_s", mode="before")
    @classmethod
    def _one_number_is_a_list(cls, value: Any) -> Any:
        return (value,) if isinstance(value, int | float) else value

    @field_validator("vpp")
    @classmethod
    def _resolve_vpp(cls, value: int | None, info: ValidationInfo) -> int | None:
        schedule = info.data.get("schedule")
        return value if value is not None or schedule is None else default_vpp(schedule)

    @field_validator("fw_s", "bw_s", "w_s")
    @classmethod
    def _per_stage(cls, value: tuple[float, ...], info: ValidationInfo) -> tuple[float, ...]:
        stages = cls._stages(info)
        if stages is None or len(value) == stages:
            return value
        if len(value) == 1:
            return value * stages
        raise ValueError(
            f"{info.field_name} has {len(value)} values; give one, or pp*vpp = {stages} "
            "(one per stage)"
        )

    @field_validator("p2p_s")
    @classmethod
    def _per_boundary(cls, value: tuple[float, ...], info: ValidationInfo) -> tuple[float, ...]:
        stages = cls._stages(info)
        if stages is None or len(value) == stages - 1:
            return value
        if len(value) == 1:
            return value * max(stages - 1, 0)
        raise ValueError(
            f"p2p_s has {len(value)} values; give one, or pp*vpp - 1 = {stages - 1} "
            "(one per stage boundary)"
        )

    @staticmethod
    def _stages(info: ValidationInfo) -> int | None:
        pp, vpp = info.data.get("pp"), info.data.get("vpp")
        return pp * vpp if isinstance(pp, int) and isinstance(vpp, int) else None

    @model_validator(mode="after")
    def _check(self) -> BubbleRequest:
        bad = [s for s, (b, w) in enumerate(zip(self.bw_s, self.w_s, strict=True)) if w > b]
        if bad:
            s = bad[0]
            raise ValueError(
                f"w_s[{s}]={self.w_s[s]} exceeds bw_s[{s}]={self.bw_s[s]}: w_s is the "
                "weight-gradient part of the full backward bw_s"
            )
        try:
            check_generate_args(
                self.schedule,
                pp=self.pp,
                vpp=self.stages_per_rank,
                num_microbatches=self.num_microbatches,
            )
        except SpecError as exc:
            raise ValueError(str(exc)) from exc
        return self

    @property
    def stages_per_rank(self) -> int:
        return self.vpp if self.vpp is not None else default_vpp(self.schedule)


class TimelineEntry(_Frozen):
    action: str  # torch's notation, e.g. "2F0"
    start_s: float
    end_s: float


class BubbleResult(_Frozen):
    schedule: ScheduleName
    pp: int
    vpp: int
    num_microbatches: int
    step_time_s: float
    bubble_fraction: float  # idle rank-time / (pp * step_time_s)
    closed_form_bubble_fraction: float | None  # uniform-stage formula where one exists
    peak_inflight: tuple[int, ...]  # per stage, micro-batches whose activations it holds
    rank_peak_inflight: tuple[int, ...]  # per rank, (chunk, micro-batch) activation sets
    timeline: tuple[tuple[TimelineEntry, ...], ...]  # per rank; empty if not requested


def closed_form_bubble(schedule: ScheduleName, *, pp: int, vpp: int, m: int) -> float | None:
    """Bubble / step time for uniform stages and no p2p (Narayanan et al. 2021 §2.2.1-2.2.2).

    GPipe and 1F1B: (p-1)/(m+p-1); interleaved with v chunks: (p-1)/(v*m+p-1), exact when m
    is a multiple of p. None where no such closed form holds (zero-bubble schedules depend on
    the F/B/W ratio, Qi et al. 2024 Table 2; interleaved with m not a multiple of p).
    """
    if schedule in ("gpipe", "1f1b"):
        return (pp - 1) / (m + pp - 1)
    if schedule == "interleaved-1f1b" and m % pp == 0:
        return (pp - 1) / (vpp * m + pp - 1)
    return None


def _durations(request: BubbleRequest) -> StageDurations:
    w_s = request.w_s if request.schedule in _SPLIT else (0.0,) * len(request.w_s)
    return StageDurations(request.fw_s, request.bw_s, w_s, request.p2p_s)


def _uniform(request: BubbleRequest) -> bool:
    return (
        len(set(request.fw_s)) == 1
        and len(set(request.bw_s)) == 1
        and all(c == 0 for c in request.p2p_s)
    )


def bubble_calc(request: BubbleRequest) -> BubbleResult:
    """Simulate `request` and report step time, bubble, in-flight counts and the timeline."""
    vpp = request.stages_per_rank
    schedule: Schedule = generate(
        request.schedule, pp=request.pp, vpp=vpp, num_microbatches=request.num_microbatches
    )
    sim = simulate(schedule, _durations(request), with_timeline=request.include_timeline)
    closed = (
        closed_form_bubble(request.schedule, pp=request.pp, vpp=vpp, m=request.num_microbatches)
        if _uniform(request)
        else None
    )
    timeline = tuple(
        tuple(TimelineEntry(action=str(t.action), start_s=t.start_s, end_s=t.end_s) for t in row)
        for row in sim.timeline
    )
    return BubbleResult(
        schedule=request.schedule,
        pp=request.pp,
        vpp=vpp,
        num_microbatches=request.num_microbatches,
        step_time_s=sim.step_time_s,
        bubble_fraction=sim.bubble_fraction,
        closed_form_bubble_fraction=closed,
        peak_inflight=sim.peak_inflight,
        rank_peak_inflight=rank_peak_inflight(schedule),
        timeline=timeline,
    )


def timeline_svg(request: BubbleRequest, *, title: str = "") -> str:
    """The simulated timeline of `request` as an SVG document (see planner.schedules.svg)."""
    schedule = generate(
        request.schedule,
        pp=request.pp,
        vpp=request.stages_per_rank,
        num_microbatches=request.num_microbatches,
    )
    return render_timeline_svg(schedule, simulate(schedule, _durations(request)), title=title)


class BubbleTableRow(_Frozen):
    schedule: ScheduleName
    pp: int
    vpp: int
    num_microbatches: int
    bubble_fraction: float  # simulated
    closed_form_bubble_fraction: float | None
    activation_microbatches: float  # peak on the first rank, in full micro-batches of its layers


class BubbleTable(_Frozen):
    fw_s: float
    bw_s: float
    rows: tuple[BubbleTableRow, ...]


TABLE_PP = (2, 4, 8, 16)
TABLE_M = (4, 8, 16, 32, 64)
TABLE_SCHEDULES: tuple[tuple[ScheduleName, int], ...] = (
    ("gpipe", 1),
    ("1f1b", 1),
    ("interleaved-1f1b", 2),
)


def bubble_table(*, fw_s: float = 1.0, bw_s: float = 2.0) -> BubbleTable:
    """The article's table: P in {2,4,8,16} x M in {4,8,16,32,64}, uniform stages, no p2p.

    Each rank runs the same layers in every schedule, so an interleaved chunk takes 1/v of the
    per-rank time. Activation memory is the first rank's peak in-flight count, in micro-batches
    of that rank's layers (for interleaving: chunk-micro-batches / v).
    """
    rows: list[BubbleTableRow] = []
    for name, vpp in TABLE_SCHEDULES:
        for pp in TABLE_PP:
            for m in TABLE_M:
                request = BubbleRequest(
                    schedule=name,
                    pp=pp,
                    vpp=vpp,
                    num_microbatches=m,
                    fw_s=(fw_s / vpp,),
                    bw_s=(bw_s / vpp,),
                    include_timeline=False,
                )
                result = bubble_calc(request)
                rows.append(
                    BubbleTableRow(
                        schedule=name,
                        pp=pp,
                        vpp=vpp,
                        num_microbatches=m,
                        bubble_fraction=result.bubble_fraction,
                        closed_form_bubble_fraction=result.closed_form_bubble_fraction,
                        activation_microbatches=result.rank_peak_inflight[0] / vpp,
                    )
                )
    return BubbleTable(fw_s=fw_s, bw_s=bw_s, rows=tuple(rows))


class MicrobatchTarget(_Frozen):
    schedule: ScheduleName
    pp: int
    vpp: int
    target_bubble_fraction: float
    num_microbatches: int | None  # None: not reached up to max_microbatches
    bubble_fraction: float | None  # at num_microbatches
    max_microbatches: int


def smallest_microbatches(
    request: BubbleRequest, target_bubble_fraction: float, *, max_microbatches: int = 2048
) -> MicrobatchTarget:
    """The fewest micro-batches m whose simulated bubble is <= the target.

    `request.num_microbatches` is ignored. Searches m among the values the schedule accepts
    (interleaved needs m % max(1, m // pp) == 0) by doubling, then bisection; this assumes the
    bubble falls as m grows, which holds for these schedules (idle time at the ends is fixed
    while busy time grows with m).
    """
    if not 0 < target_bubble_fraction < 1:
        raise SpecError("target_bubble_fraction", target_bubble_fraction, "must be in (0, 1)")
    vpp = request.stages_per_rank
    durations = _durations(request)
    cache: dict[int, float] = {}

    def accepted(m: int) -> bool:
        try:
            check_generate_args(request.schedule, pp=request.pp, vpp=vpp, num_microbatches=m)
        except SpecError:
            return False
        return True

    def valid_at_least(m: int) -> int:
        while m <= max_microbatches and not accepted(m):
            m += 1
        return m

    def reached(m: int) -> bool:
        if m not in cache:
            schedule = generate(request.schedule, pp=request.pp, vpp=vpp, num_microbatches=m)
            cache[m] = simulate(schedule, durations, with_timeline=False).bubble_fraction
        return cache[m] <= target_bubble_fraction + 1e-12  # 7/70 must count as 0.1

    lo, hi = 0, valid_at_least(1)  # invariant: nothing valid in [1, lo] reaches the target
    while hi <= max_microbatches and not reached(hi):
        lo, hi = hi, valid_at_least(hi * 2)
    found: int | None = None
    if hi <= max_microbatches:
        candidates = [m for m in range(lo + 1, hi + 1) if accepted(m)]
        left, right = 0, len(candidates) - 1  # candidates[right] reaches the target
        while left < right:
            mid = (left + right) // 2
            if reached(candidates[mid]):
                right = mid
            else:
                left = mid + 1
        found = candidates[right]
    return MicrobatchTarget(
        schedule=request.schedule,
        pp=request.pp,
        vpp=vpp,
        target_bubble_fraction=target_bubble_fraction,
        num_microbatches=found,
        bubble_fraction=cache.get(found) if found is not None else None,
        max_microbatches=max_microbatches,
    )
