"""Our orders equal torch.distributed.pipelining's own, compute actions only, per rank."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from planner.errors import SpecError
from planner.schedules import generate, validate

torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
visualizer = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")

TORCH_NAME = {
    "interleaved-1f1b": "Interleaved1F1B",
    "zb-h1": "InterleavedZeroBubble",
    "zbv": "ZBVZeroBubble",
}


def torch_orders(name: str, pp: int, m: int, vpp: int) -> list[list[str]]:
    if vpp >= 2:
        ops: Any = visualizer.get_schedule_ops(TORCH_NAME[name], pp, m, num_stages_per_rank=vpp)
    else:
        # get_schedule_ops refuses one stage per rank for torch's multi-stage classes, but
        # ScheduleInterleavedZeroBubble itself accepts it (that is ZB-H1). Build it the way the
        # visualizer does: a stand-in PipelineStage that only answers group_rank/group_size.
        from unittest import mock

        from torch.distributed.pipelining.stage import PipelineStage

        stage = mock.create_autospec(PipelineStage, instance=True)
        stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, pp, None, pp
        cls = torch_schedules.get_schedule_class(TORCH_NAME[name])
        instance = cls([stage], m)
        ops = [instance.pipeline_order[r] for r in range(pp)]
    return [[str(a) for a in rank if a is not None and a.is_compute_op] for rank in ops]


CASES = [
    (name, pp, vpp, m)
    for name, vpps in (("interleaved-1f1b", (2, 3)), ("zb-h1", (1, 2, 3)), ("zbv", (2,)))
    for pp, vpp, m in itertools.product((1, 2, 3, 4, 8), vpps, (1, 3, 4, 6, 9, 16))
]


@pytest.mark.slow  # ~45 ms per case, most of it torch building its comm-annotated schedule
@pytest.mark.parametrize(("name", "pp", "vpp", "m"), CASES)
def test_order_matches_torch(name: str, pp: int, vpp: int, m: int) -> None:
    try:
        expected = torch_orders(name, pp, m, vpp)
    except (ValueError, AssertionError):
        with pytest.raises(SpecError):
            generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
        return
    schedule = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    assert [[str(a) for a in order] for order in schedule.orders] == expected
    validate(schedule)


def test_interleaved_round_rule_names_num_microbatches() -> None:
    with pytest.raises(SpecError) as info:
        generate("interleaved-1f1b", pp=4, vpp=2, num_microbatches=9)  # 9 % max(1, 9 // 4) != 0
    assert info.value.field == "num_microbatches"
    assert "9" in str(info.value) and "pp=4" in str(info.value)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (3, 5), (4, 8)])
def test_gpipe_equals_torch_and_torch_visualizer_1f1b_last_rank_is_invalid(pp: int, m: int) -> None:
    # REFERENCE.md: the visualizer's 1F1B order is not what Schedule1F1B executes. Ours follows
    # Schedule1F1B._step_microbatches: min(m, pp - s) forwards, then B and F alternate.
    gpipe = visualizer.get_schedule_ops("GPipe", pp, m)
    ours = generate("gpipe", pp=pp, vpp=1, num_microbatches=m)
    assert [[str(a) for a in r if a is not None and a.is_compute_op] for r in gpipe] == [
        [str(a) for a in order] for order in ours.orders
    ]
    theirs = [
        [str(a) for a in r if a is not None and a.is_compute_op]
        for r in visualizer.get_schedule_ops("1F1B", pp, m)
    ]
    one_f_one_b = generate("1f1b", pp=pp, vpp=1, num_microbatches=m)
    mine = [[str(a) for a in order] for order in one_f_one_b.orders]
    assert theirs[:-1] == mine[:-1]
    assert theirs[-1][0] == f"{pp - 1}F1"  # skips micro-batch 0 and runs one past the end
    assert mine[-1][:2] == [f"{pp - 1}F0", f"{pp - 1}B0"]
    assert f"{pp - 1}F{m}" in theirs[-1]
