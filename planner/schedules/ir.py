"""The schedule IR (DESIGN.md, contract 5).

An action is `(stage, kind, microbatch)` and prints like torch's `2F0`: stage 2, forward,
micro-batch 0. Kinds: `F` forward, `B` full backward, `I` input-gradient backward,
`W` weight-gradient backward (a zero-bubble schedule splits B into I then W).
A schedule is one ordered action list per pipeline rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from planner.specs.base import ScheduleName


class ActionKind(StrEnum):
    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - torch's name for the input-gradient backward
    W = "W"


_ACTION = re.compile(r"^(\d+)([FBIW])(\d+)$")


@dataclass(frozen=True, slots=True)
class Action:
    stage: int
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> Action:
        match = _ACTION.match(text.strip())
        if match is None:
            raise ValueError(f"not an action: {text!r} (expected e.g. '2F0')")
        return cls(int(match[1]), ActionKind(match[2]), int(match[3]))


def stage_to_rank(stage: int, *, pp: int, schedule: ScheduleName) -> int:
    """The pipeline rank that runs `stage`: looped for all schedules, a V for `zbv`."""
    if schedule == "zbv":
        return stage if stage < pp else 2 * pp - 1 - stage
    return stage % pp


@lru_cache(maxsize=1024)
def stage_ranks(num_stages: int, *, pp: int, schedule: ScheduleName) -> tuple[int, ...]:
    """Every stage's rank (stage_to_rank of 0 .. num_stages - 1), kept per (stages, pp,
    schedule): the cost model builds it for every configuration it scores."""
    return tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(num_stages))


@lru_cache(maxsize=256)
def rank_stages(stage_rank: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Per rank, its stages in order (stage_rank: each stage's rank, 0 .. pp - 1): the
    chunks of an interleaved or zbv rank, first to last."""
    out: list[list[int]] = [[] for _ in range(max(stage_rank) + 1)]
    for s, r in enumerate(stage_rank):
        out[r].append(s)
    return tuple(map(tuple, out))


@dataclass(frozen=True)
class Schedule:
    """One action list per rank. `num_stages = pp * vpp`."""

    name: ScheduleName
    pp: int
    vpp: int
    num_microbatches: int
    orders: Sequence[tuple[Action, ...]]  # a tuple, or generators.Orders (built lazily)

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    def rank_of(self, stage: int) -> int:
        return stage_to_rank(stage, pp=self.pp, schedule=self.name)

    def format(self) -> str:
        """The rank x step grid, one row per rank."""
        width = max((len(str(a)) for order in self.orders for a in order), default=2)
        rows = []
        for rank, order in enumerate(self.orders):
            cells = " ".join(str(a).rjust(width) for a in order)
            rows.append(f"rank {rank}: {cells}")
        return "\n".join(rows)
