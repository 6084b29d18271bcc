"""`python -m profiler.run_plan` runs plans with context and expert parallelism: the gradients
of both steps (the untimed and the timed one, the runner's SGD step between) equal a single
process's on the whole batch (real processes on gloo, fp32, the
tolerances of the other runner tests), for ep = 2, cp = 2, and ep = 2 with pp = 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_plan_support import assert_same_grads, make_plan, run_forked

from planner.launch import unsupported
from planner.plan import Plan
from planner.specs.model import ModelArch
from profiler.models import tiny_arch, tiny_moe_arch


def folded_plan(arch: ModelArch, *, pp: int = 1, dp: int = 1, cp: int = 1, ep: int = 1) -> Plan:
    """The runner's plan for `arch` with these degrees. The cost model does not cost MoE or
    head_dim yet (docs/moe.md), so the plan is made for the dense twin (same layers) and
    given the arch and degrees after; the runner reads only the shapes and degrees."""
    dense = arch.model_copy(update={"moe": None, "head_dim": None})
    base = make_plan(ModelArch.model_validate(dense.model_dump()), pp=pp, dp=dp,
                     schedule="gpipe" if pp > 1 else "1f1b", microbatches=2)  # fmt: skip
    doc = {**base.model_dump(), "arch": arch.model_dump(), "cp": cp, "ep": ep}
    doc["num_gpus"] = base.num_gpus * cp
    plan = Plan.model_validate(doc)
    assert unsupported(plan, "meshplan") == []
    return plan


def test_ep2_equals_one_process(tmp_path: Path) -> None:
    plan = folded_plan(tiny_moe_arch(), dp=2, ep=2)
    assert assert_same_grads(plan, run_forked(plan, tmp_path)) == 2


def test_cp2_equals_one_process(tmp_path: Path) -> None:
    plan = folded_plan(tiny_arch("llama"), cp=2)
    assert assert_same_grads(plan, run_forked(plan, tmp_path)) == 2


def test_cp2_with_ep2_on_the_same_ranks_equals_one_process(tmp_path: Path) -> None:
    plan = folded_plan(tiny_moe_arch(), cp=2, ep=2)  # the ep group is the cp group
    assert assert_same_grads(plan, run_forked(plan, tmp_path)) == 2


def test_ep2_with_pp2_equals_one_process(tmp_path: Path) -> None:
    plan = folded_plan(tiny_moe_arch(), pp=2, dp=2, ep=2)
    assert assert_same_grads(plan, run_forked(plan, tmp_path, timeout_s=240)) == 2


def test_the_runner_refuses_what_it_does_not_run() -> None:
    from profiler.runner.folded import check_folded

    plan = folded_plan(tiny_moe_arch(), dp=2, ep=2)
    gathered = plan.model_copy(update={"cp": 2, "cp_comm": "all_gather"})
    with pytest.raises(ValueError, match="cp_comm='all_gather'"):
        check_folded(gathered)
    assert "cp_comm='all_gather'" in " ".join(unsupported(gathered, "meshplan"))


def test_cp2_with_pp2_equals_one_process(tmp_path: Path) -> None:
    plan = folded_plan(tiny_arch("gpt"), pp=2, cp=2)  # learned positions, tied embeddings
    assert assert_same_grads(plan, run_forked(plan, tmp_path, timeout_s=240)) == 2
