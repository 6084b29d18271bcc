"""The search's closed-form in-flight floor (bounds.group_inflight) is a lower bound of the
peak in-flight micro-batches of the real schedules, well beyond the sizes its own tests cover.

The bound is what lets group floors skip schedule generation, so a violation at some large
(pp, m, vpp) would make the search prune a configuration that could win.
"""

from __future__ import annotations

import pytest

from planner.errors import SpecError
from planner.schedules import generate, peak_inflight
from planner.schedules.ir import stage_to_rank
from planner.specs.base import ScheduleName

CASES: tuple[tuple[ScheduleName, tuple[int, ...]], ...] = (
    ("gpipe", (1,)),
    ("1f1b", (1,)),
    ("zb-h1", (1,)),
    ("interleaved-1f1b", (2, 3, 4)),
    ("zbv", (2,)),
)
MICROBATCHES = (1, 2, 3, 5, 8, 13, 16, 24, 32, 48, 64)


def closed_form(schedule: ScheduleName, *, pp: int, rank: int, m: int) -> int:
    # Written from the schedules' warm-up phases, independently of planner.search.bounds:
    # looped schedules run min(m, pp - r) forwards of every chunk on rank r before its first
    # backward there; zbv's second chunk of rank r (stage 2pp-1-r) holds min(m, r + 1).
    return min(m, rank + 1) if schedule == "zbv" else min(m, pp - rank)


@pytest.mark.parametrize(("schedule", "vpps"), CASES)
@pytest.mark.parametrize("pp", [2, 5, 8, 12, 16, 24, 32])
def test_peak_inflight_is_at_least_the_closed_form(
    schedule: ScheduleName, vpps: tuple[int, ...], pp: int
) -> None:
    checked = 0
    for vpp in vpps:
        for m in MICROBATCHES:
            try:
                sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=m)
            except SpecError:
                continue  # torch's own rules (e.g. interleaved's m % max(1, m // pp))
            checked += 1
            peaks = peak_inflight(sched)
            for stage, peak in enumerate(peaks):
                rank = stage_to_rank(stage, pp=pp, schedule=schedule)
                floor = closed_form(schedule, pp=pp, rank=rank, m=m)
                assert peak >= floor, (schedule, pp, vpp, m, stage, peak, floor)
    assert checked > 0


def test_the_search_uses_the_same_closed_form() -> None:
    from planner.cost import partition_inputs
    from planner.search.bounds import group_inflight
    from planner.specs import Candidate, PlanRequest

    request = PlanRequest.model_validate(
        {
            "model": {"family": "gpt", "num_layers": 16, "hidden_size": 256,
                      "num_attention_heads": 4, "vocab_size": 512},
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "training": {"global_batch_size": 16, "seq_length": 128},
        }
    )  # fmt: skip
    for schedule, vpp in (("1f1b", 1), ("interleaved-1f1b", 2), ("zbv", 2)):
        cand = Candidate(pp=8, vpp=vpp, schedule=schedule, micro_batch_size=1)
        inputs = partition_inputs(request, cand)
        want = tuple(
            closed_form(schedule, pp=8, rank=r, m=inputs.num_microbatches)
            for r in inputs.stage_rank
        )
        assert group_inflight(inputs) == want
