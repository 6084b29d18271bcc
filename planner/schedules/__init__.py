"""Pipeline schedules as data: the IR, generators, validator, simulator and timeline renderer."""

from planner.schedules.generators import check_generate_args, generate, peak_inflight_of
from planner.schedules.inflight import peak_inflight, rank_peak_inflight
from planner.schedules.ir import Action, ActionKind, Schedule, rank_stages, stage_to_rank
from planner.schedules.sim_types import SimResult, StageDurations, TimedAction
from planner.schedules.simulate import simulate, simulate_unchecked
from planner.schedules.svg import render_timeline_svg
from planner.schedules.validate import format_grid, validate

__all__ = [
    "Action",
    "ActionKind",
    "Schedule",
    "SimResult",
    "StageDurations",
    "TimedAction",
    "check_generate_args",
    "format_grid",
    "generate",
    "peak_inflight",
    "peak_inflight_of",
    "rank_peak_inflight",
    "rank_stages",
    "render_timeline_svg",
    "simulate",
    "simulate_unchecked",
    "stage_to_rank",
    "validate",
]
