"""DeepSpeed configs: the batch identity in every emitted config, and the refusals."""

from __future__ import annotations

import json

import pytest
from launch_plans import GPT_1B, make_plan, ranges_from_decoders

from planner.errors import UnsupportedPlanError
from planner.launch import TARGETS, Deployment, render, unsupported
from planner.plan import Plan

GPT_30 = GPT_1B.model_copy(update={"num_layers": 30})  # 32 layers: 8 per stage, decoders 7-8-8-7

PLANS = {
    "dp8 zero0": make_plan(dp=8, gbs=64),
    "dp8 zero1 mbs2": make_plan(dp=8, mbs=2, zero=1, gbs=128),
    "dp4 zero2": make_plan(dp=4, zero=2, gbs=32, recompute="full"),
    "dp8 zero3": make_plan(dp=8, zero=3, gbs=64),
    "pp4 dp2 zero1 type-partition": make_plan(pp=4, dp=2, zero=1, gbs=64, recompute="full",
                                              stages=ranges_from_decoders([8, 8, 8, 8])),
    "pp4 uniform-partition": make_plan(arch=GPT_30, pp=4, dp=2, gbs=64,
                                       stages=[(0, 8), (8, 16), (16, 24), (24, 32)]),
    "tp2 pp2 dp2": make_plan(tp=2, pp=2, dp=2, mbs=4, gbs=64,
                             stages=ranges_from_decoders([16, 16])),
}  # fmt: skip


def ds_config(plan: Plan, target: str = "torchrun") -> dict[str, object]:
    bundle = render(plan, Deployment(), target=target, framework="deepspeed")  # type: ignore[arg-type]
    doc: dict[str, object] = json.loads(bundle.file("ds_config.json").content)
    return doc


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(PLANS))
def test_train_batch_size_is_micro_times_accumulation_times_dp(name: str, target: str) -> None:
    plan = PLANS[name]
    doc = ds_config(plan, target)
    micro, accum = doc["train_micro_batch_size_per_gpu"], doc["gradient_accumulation_steps"]
    assert doc["train_batch_size"] == micro * accum * plan.dp  # type: ignore[operator]
    assert doc["train_batch_size"] == plan.global_batch_size
    assert micro == plan.micro_batch_size
    assert doc["zero_optimization"] == {"stage": plan.zero_stage}


def test_pipeline_partition_and_checkpoint_interval() -> None:
    bundle = render(PLANS["pp4 dp2 zero1 type-partition"], Deployment(), target="torchrun",
                    framework="deepspeed")  # fmt: skip
    pipe = json.loads(bundle.file("ds_pipeline.json").content)
    assert pipe["partition_method"] == "type:DecoderLayer"
    assert pipe["activation_checkpoint_interval"] == 1
    assert pipe["topology"] == {"num_pp": 4, "num_mp": 1, "num_dp": 2}
    assert pipe["layer_counts"] == {"embedding": 1, "DecoderLayer": 32, "head": 1}
    uniform = render(PLANS["pp4 uniform-partition"], Deployment(), target="torchrun",
                     framework="deepspeed")  # fmt: skip
    assert json.loads(uniform.file("ds_pipeline.json").content)["partition_method"] == "uniform"
    assert "--deepspeed_config" in uniform.commands[0]


@pytest.mark.parametrize("zero", [2, 3])
def test_zero2_and_3_with_pipeline_are_refused(zero: int) -> None:
    plan = make_plan(pp=2, dp=4, gbs=64).model_copy(update={"zero_stage": zero})
    with pytest.raises(UnsupportedPlanError) as info:
        render(plan, Deployment(), target="torchrun", framework="deepspeed")
    assert any(f"zero_stage={zero} with pp=2" in r for r in info.value.reasons)


def test_split_deepspeed_cannot_describe_is_refused_with_the_counts() -> None:
    plan = make_plan(pp=4, gbs=64, stages=ranges_from_decoders([6, 9, 9, 8]))
    reasons = unsupported(plan, "deepspeed")
    assert any("[6, 9, 9, 8]" in r and "partition_method" in r for r in reasons)


def test_schedules_and_recompute_deepspeed_lacks() -> None:
    inter = make_plan(pp=2, vpp=2, schedule="interleaved-1f1b", gbs=16)
    assert any("1F1B" in r for r in unsupported(inter, "deepspeed"))
    sel = make_plan(dp=2, gbs=16, recompute="selective")
    assert any("selective" in r for r in unsupported(sel, "deepspeed"))
    sp = make_plan(tp=2, sp=True, gbs=16)
    assert any("sequence parallel" in r for r in unsupported(sp, "deepspeed"))
