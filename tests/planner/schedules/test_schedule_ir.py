"""Stage-to-rank bookkeeping of the schedule IR (planner.schedules.ir)."""

from __future__ import annotations

import pytest

from planner.schedules import rank_stages, stage_to_rank
from planner.specs.base import ScheduleName


@pytest.mark.parametrize(("schedule", "pp", "vpp"), [("zbv", 4, 2), ("interleaved-1f1b", 3, 4)])
def test_rank_stages_lists_each_ranks_chunks_in_order(
    schedule: ScheduleName, pp: int, vpp: int
) -> None:
    """rank_stages groups stages by stage_to_rank: every stage once, on its rank, ascending;
    zbv's V puts rank r's chunks at r and 2 pp - 1 - r."""
    rank_of = tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp))
    got = rank_stages(rank_of)
    assert sorted(s for stages in got for s in stages) == list(range(pp * vpp))
    for r, stages in enumerate(got):
        assert len(stages) == vpp and list(stages) == sorted(stages)
        assert all(rank_of[s] == r for s in stages)
    if schedule == "zbv":
        assert got[1] == (1, 2 * pp - 2)
