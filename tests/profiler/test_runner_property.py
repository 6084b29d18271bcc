"""Plans the planner emits for framework `meshplan` run in the reference runner as emitted.

A fixed handful of the property bench's cases (`bench/runner_property.py` draws random ones):
the search, pinned to each case with `constraints.framework = "meshplan"`, plans it; the
runner trains the plan 2 steps on gloo (`--optimizer sgd`) and both steps' gradients equal one
process replaying them (rtol=1e-4, atol=1e-5). And `unsupported(..., "meshplan")` refuses
exactly the micro-batch counts torch's schedule classes refuse, checked against the classes
themselves through the runner's `build_schedule` on a fake process group.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from runner_cases import Case, check_case, emitted_plan
from torch.distributed.pipelining import PipelineStage
from torch.testing._internal.distributed.fake_pg import FakeStore

from planner.launch.render import unsupported
from planner.schedules import stage_to_rank
from planner.specs.base import ScheduleName
from planner.specs.request import Candidate
from profiler.runner.schedule import build_schedule

CASES = {
    # GPipe, pp=3 on 3 ranks, m below pp, a cap that mixes recompute modes
    "gpipe-pp3-m2-cap": Case(
        family="gpt", num_layers=5, hidden_size=32, schedule="gpipe", pp=3, dp=1, tp=1, vpp=1,
        micro_batch_size=2, microbatches=2, zero_stage=0, sequence_parallel=False,
        memory_fraction=0.8,
    ),
    # interleaved pp2 x dp2 (DDP) vpp3, m at 2 pp, uneven stages
    "interleaved-pp2-dp2-vpp3": Case(
        family="gpt", num_layers=5, hidden_size=32, schedule="interleaved-1f1b", pp=2, dp=2,
        tp=1, vpp=3, micro_batch_size=1, microbatches=4, zero_stage=0, sequence_parallel=False,
    ),
    # 1F1B pp2 x tp2 with sequence parallel, Llama (GQA), m above pp
    "1f1b-pp2-tp2-sp-llama": Case(
        family="llama", num_layers=3, hidden_size=32, schedule="1f1b", pp=2, dp=1, tp=2,
        vpp=1, micro_batch_size=1, microbatches=3, zero_stage=0, sequence_parallel=True,
    ),
    # ZB-H1 pp2 x dp2 with ZeRO 1 (FSDP2 under a split backward)
    "zbh1-pp2-dp2-zero1": Case(
        family="gpt", num_layers=4, hidden_size=32, schedule="zb-h1", pp=2, dp=2, tp=1, vpp=1,
        micro_batch_size=2, microbatches=2, zero_stage=1, sequence_parallel=False,
    ),
    # ZB-V pp2, m below pp, a cap
    "zbv-pp2-m1-cap": Case(
        family="llama", num_layers=4, hidden_size=32, schedule="zbv", pp=2, dp=1, tp=1, vpp=2,
        micro_batch_size=2, microbatches=1, zero_stage=0, sequence_parallel=False,
        memory_fraction=0.85,
    ),
    # pp=1: dp2 x tp2 with ZeRO 3 (FSDP2 over DTensor shards)
    "1f1b-pp1-dp2-tp2-zero3": Case(
        family="gpt", num_layers=2, hidden_size=32, schedule="1f1b", pp=1, dp=2, tp=2, vpp=1,
        micro_batch_size=1, microbatches=2, zero_stage=3, sequence_parallel=True,
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_an_emitted_plan_trains_like_one_process(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    plan = emitted_plan(case)
    assert plan is not None, f"the search emitted no plan for {case.describe()}"
    assert (plan.schedule, plan.pp, plan.dp, plan.tp, plan.vpp) == (
        case.schedule, case.pp, case.dp, case.tp, case.vpp,
    )  # fmt: skip
    assert (plan.num_microbatches, plan.zero_stage) == (case.microbatches, case.zero_stage)
    assert unsupported(plan, "meshplan") == []
    assert check_case(plan, tmp_path) == 2


def test_the_cases_cover_what_they_claim() -> None:
    """Uneven stages and a per-layer recompute mix are what the search emits for these."""
    interleaved = emitted_plan(CASES["interleaved-pp2-dp2-vpp3"])
    assert interleaved is not None
    sizes = {s.layers[1] - s.layers[0] for s in interleaved.stages}
    assert len(sizes) > 1, interleaved.stages
    capped = emitted_plan(CASES["gpipe-pp3-m2-cap"])
    assert capped is not None
    modes = {m for s in capped.stages for m in (s.recompute or ())}
    assert len(modes) > 1, capped.stages


@pytest.fixture
def fake_group() -> Iterator[int]:
    """A fake 4-rank process group: torch's schedule classes build their orders, nothing runs."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    world = 4
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield world
    finally:
        dist.destroy_process_group()


def _torch_accepts(schedule: ScheduleName, *, pp: int, vpp: int, m: int) -> bool:
    group = dist.new_group(list(range(pp)))
    mine = [i for i in range(pp * vpp) if stage_to_rank(i, pp=pp, schedule=schedule) == 0]
    stages = [
        PipelineStage(torch.nn.Linear(2, 2), i, pp * vpp, torch.device("cpu"), group=group)
        for i in mine
    ]
    try:
        build_schedule(schedule, stages, num_microbatches=m)
    except ValueError:
        return False
    return True


def test_unsupported_refuses_what_torch_refuses(fake_group: int) -> None:
    refused = 0
    grid = (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1), ("zbv", 2))
    for schedule, vpp in grid:
        for pp in (2, 3, 4):
            for m in range(1, 3 * pp + 2):
                candidate = Candidate(pp=pp, dp=1, tp=1, vpp=vpp, schedule=schedule)
                reasons = unsupported(candidate, "meshplan", global_batch_size=m)
                accepted = _torch_accepts(schedule, pp=pp, vpp=vpp, m=m)
                assert accepted == (reasons == []), (schedule, pp, m, reasons)
                refused += not accepted
    assert refused > 0  # the grid reaches torch's limits
