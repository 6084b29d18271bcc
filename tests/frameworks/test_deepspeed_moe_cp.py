"""DeepSpeed refuses context- and expert-parallel plans, for the reasons its own code gives:
expert parallelism is a model-code argument (`deepspeed.moe.layer.MoE(ep_size=...)`), not a
key of the JSON config meshplan writes, and its sequence parallelism (Ulysses) splits heads."""

from __future__ import annotations

import inspect

import pytest
from deepspeed.moe.layer import MoE
from launch_plans import LLAMA_8B, make_plan, qwen3_30b_capacity

from planner.errors import UnsupportedPlanError
from planner.launch import Deployment, render


def test_expert_parallel_plans_are_refused_with_the_reason() -> None:
    assert "ep_size" in inspect.signature(MoE.__init__).parameters  # set in the model code
    with pytest.raises(UnsupportedPlanError) as err:
        render(qwen3_30b_capacity(ep=8), Deployment(), target="torchrun", framework="deepspeed")
    assert any(r.startswith("ep=8: DeepSpeed's expert parallelism is set in the model code")
               for r in err.value.reasons)  # fmt: skip


def test_context_parallel_plans_are_refused_with_the_reason() -> None:
    plan = make_plan(arch=LLAMA_8B, cp=2, dp=4, gbs=8, seq=8192)
    with pytest.raises(UnsupportedPlanError) as err:
        render(plan, Deployment(), target="torchrun", framework="deepspeed")
    assert any("cp=2 with cp_comm='p2p': DeepSpeed has no context parallelism" in r
               for r in err.value.reasons)  # fmt: skip


def test_an_moe_model_without_ep_still_launches() -> None:
    bundle = render(qwen3_30b_capacity(ep=1), Deployment(), target="torchrun",
                    framework="deepspeed")  # fmt: skip
    assert any(f.name == "ds_config.json" for f in bundle.files)
