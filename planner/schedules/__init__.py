"""Pipeline schedules as data: the IR, generators, validator, simulator and timeline renderer."""

from planner.schedules.ir import Action, ActionKind, Schedule, stage_to_rank

__all__ = ["Action", "ActionKind", "Schedule", "stage_to_rank"]
