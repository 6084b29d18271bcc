"""Searched plans carry cp, cp_comm, ep and etp into the Plan, its `why` and the launch flags."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from planner.launch import Deployment, render
from planner.plan import Plan
from planner.search import search
from planner.specs import PlanRequest

from .helpers import TINY, TINY_MOE


def searched(model: dict[str, Any], **constraints: Any) -> Plan:
    req = PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
            "training": {"global_batch_size": 8, "seq_length": 2048},
            "constraints": constraints,
            "search": {"time_limit_s": 60, "top_k": 1},
        }
    )
    return search(req).plan


def words(plan: Plan, framework: str) -> list[str]:
    bundle = render(plan, Deployment(), target="torchrun", framework=framework)  # type: ignore[arg-type]
    return shlex.split(bundle.commands[0])


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_pinned_cp_reaches_the_plan_why_and_megatron_flags() -> None:
    plan = searched(TINY, cp=[2], cp_comm=["all_gather"], framework="megatron")
    assert (plan.cp, plan.cp_comm) == (2, "all_gather")
    assert plan.tp * plan.cp * plan.pp * plan.dp == 8
    assert plan.candidate().cp == 2 and plan.candidate().cp_comm == "all_gather"
    assert any(line.startswith("Context parallel: cp=2") for line in plan.why)
    argv = words(plan, "megatron")
    assert flag(argv, "--context-parallel-size") == "2"
    assert flag(argv, "--cp-comm-type") == "all_gather"


def test_a_pinned_ep_reaches_the_plan_why_and_megatron_flags() -> None:
    plan = searched(TINY_MOE, ep=[4], framework="megatron")
    assert plan.ep == 4 and plan.edp * plan.ep * plan.etp == plan.tp * plan.cp * plan.dp
    assert any(line.startswith("Expert parallel: ep=4 puts 1 of the 4") for line in plan.why)
    argv = words(plan, "megatron")
    assert flag(argv, "--expert-model-parallel-size") == "4"
    assert flag(argv, "--expert-tensor-parallel-size") == str(plan.etp)


def test_torchtitan_gets_its_degrees() -> None:
    plan = searched(TINY_MOE, cp=[2], ep=[2], framework="torchtitan")
    assert (plan.cp, plan.cp_comm, plan.ep, plan.etp) == (2, "all_gather", 2, 1)
    argv = words(plan, "torchtitan")
    assert flag(argv, "--parallelism.context-parallel-degree") == "2"
    assert flag(argv, "--parallelism.expert-parallel-degree") == "2"


@pytest.mark.parametrize("field", ["cp", "ep", "etp"])
def test_deepspeed_cannot_take_them(field: str) -> None:
    from planner.errors import InfeasibleError

    with pytest.raises(InfeasibleError):
        searched(TINY_MOE, framework="deepspeed", **{field: [2]})
