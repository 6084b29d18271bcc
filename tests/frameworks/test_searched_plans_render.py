"""Plans searched with constraints.framework = X render for X, on every target.

The capability table and each framework's `unsupported()` are what the search narrows with
(planner.search.space), so nothing a search returns for a framework is refused when rendered.
"""

from __future__ import annotations

import pytest
from searched_plans import FRAMEWORKS, REQUESTS, cases, request, searched

from planner.errors import InfeasibleError
from planner.launch import TARGETS, Deployment, render, unsupported
from planner.search import search
from planner.specs import PlanRequest


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_searched_plan_renders_for_its_framework(framework: str) -> None:
    found = cases(framework)
    assert len({name for name, _, _ in found}) >= len(REQUESTS) - 3  # most requests have plans
    for name, i, plan in found:
        assert unsupported(plan, framework) == [], (name, i)  # type: ignore[arg-type]
        for target in TARGETS:
            bundle = render(plan, Deployment(), target=target, framework=framework)  # type: ignore[arg-type]
            assert bundle.commands, (name, i, target)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_searched_plans_vary_every_axis(framework: str) -> None:
    plans = [plan for _, _, plan in cases(framework)]
    assert {p.tp for p in plans} >= {1, 2, 4}
    assert {p.pp for p in plans} >= {1, 2, 3}
    assert {p.recompute for p in plans} >= {"none", "full"}
    assert len({p.zero_stage for p in plans}) >= 2
    if framework != "deepspeed":
        assert max(p.vpp for p in plans) >= 2
        assert any(p.sequence_parallel for p in plans)
        assert "selective" in {p.recompute for p in plans}


def test_deepspeed_plans_never_use_sequence_parallel() -> None:
    # a search for DeepSpeed once returned sequence_parallel: true, which its renderer refuses
    plans = [plan for _, _, plan in cases("deepspeed")]
    assert any(p.tp > 1 for p in plans)
    assert not any(p.sequence_parallel for p in plans)
    assert searched("deepspeed", "sequence parallel asked") is None  # asked for, cannot be had


def test_a_request_the_framework_cannot_meet_is_infeasible_not_unrenderable() -> None:
    assert searched("torchtitan", "zero1 pp2") is None  # ZeRO-1 is no torchtitan setting
    assert searched("megatron", "zero3 pp1") is None  # ZeRO-3 is no Megatron flag
    with pytest.raises(InfeasibleError):
        search(request("deepspeed", "selective recompute"))


@pytest.mark.slow
def test_llama8b_on_64_gpus_for_torchtitan_renders() -> None:
    # the case that once returned ZeRO 0 with dp 16, tp 2, pp 2 and was refused by the renderer
    llama8b = {"family": "llama", "name": "llama3-8b", "num_layers": 32, "hidden_size": 4096,
               "num_attention_heads": 32, "num_kv_heads": 8, "ffn_hidden_size": 14336,
               "vocab_size": 128256}  # fmt: skip
    req = PlanRequest.model_validate(
        {
            "model": llama8b,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
            "training": {"global_batch_size": 256, "seq_length": 4096},
            "constraints": {"framework": "torchtitan", "pp": [2]},
        }
    )
    result = search(req)
    for plan in (result.plan, *result.alternatives):
        assert unsupported(plan, "torchtitan") == []
        render(plan, Deployment(nodes=8), target="slurm", framework="torchtitan")
