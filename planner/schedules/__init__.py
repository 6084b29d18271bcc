"""Pipeline schedules as data: the IR, generators, validator, simulator and timeline renderer."""

from planner.schedules.generators import check_generate_args, generate, peak_inflight_of
from planner.schedules.inflight import (
    HeldPoint,
    coheld_counts,
    held_points_of,
    peak_inflight,
    rank_held_points,
    rank_peak_inflight,
)
from planner.schedules.ir import (
    Action,
    ActionKind,
    Schedule,
    rank_stages,
    stage_ranks,
    stage_to_rank,
)
from planner.schedules.sim_types import SimResult, StageDurations, TimedAction
from planner.schedules.simulate import simulate, simulate_unchecked
from planner.schedules.svg import render_timeline_svg
from planner.schedules.validate import format_grid, validate

__all__ = [
    "Action",
    "ActionKind",
    "HeldPoint",
    "Schedule",
    "SimResult",
    "StageDurations",
    "TimedAction",
    "check_generate_args",
    "coheld_counts",
    "format_grid",
    "generate",
    "held_points_of",
    "peak_inflight",
    "peak_inflight_of",
    "rank_held_points",
    "rank_peak_inflight",
    "rank_stages",
    "render_timeline_svg",
    "simulate",
    "simulate_unchecked",
    "stage_ranks",
    "stage_to_rank",
    "validate",
]
