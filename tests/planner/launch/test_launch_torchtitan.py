"""torchtitan job configs load with tomllib and pass torchtitan's own checks.

Checks re-derived from torchtitan (distributed/pipeline_parallel.py `pipeline_llm`,
`build_pipeline_schedule`, `generate_llm_fqn_per_model_part`, train.py), each named.
"""

from __future__ import annotations

import math
import shlex
import tomllib
from typing import Any

import pytest
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders

from planner.errors import UnsupportedPlanError
from planner.launch import Deployment, render, unsupported
from planner.plan import Plan

SINGLE = {"GPipe", "1F1B"}


def titan_split(num_stages: int, n: int) -> list[list[str]]:
    """torchtitan's default split, from its docstring: embedding and output weigh one layer,
    effective layers spread evenly, the first `extra` stages one more."""
    if num_stages == 1:
        return [["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm", "output"]]
    per, extra = divmod(n + 2, num_stages)
    names = ["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm+output"]
    out, pos = [], 0
    for s in range(num_stages):
        size = per + (s < extra)
        chunk = names[pos : pos + size]
        pos += size
        out.append([x for c in chunk for x in (["norm", "output"] if c == "norm+output" else [c])])
    return out


def load(plan: Plan, dep: Deployment | None = None) -> dict[str, Any]:
    bundle = render(plan, dep or Deployment(), target="torchrun", framework="torchtitan")
    return tomllib.loads(bundle.file("torchtitan.toml").content)


def stage_fqns(doc: dict[str, Any], n: int) -> list[list[str]]:
    par = doc["parallelism"]
    if "module_fqns_per_model_part" in par:
        return list(par["module_fqns_per_model_part"])
    if par.get("pipeline_parallel_degree", 1) == 1:
        return titan_split(1, n)
    k = par["pipeline_parallel_layers_per_stage"]
    stages = math.ceil((n + 2) / k)
    pp = par["pipeline_parallel_degree"]
    assert stages % pp == 0, "check: number of virtual stages divisible by pp"
    single = par["pipeline_parallel_schedule"] in SINGLE
    assert (stages // pp == 1) if single else (stages // pp >= 2), (
        "check: single-stage schedule needs 1 stage per rank, multi-stage at least 2"
    )
    return titan_split(stages, n)


def check(plan: Plan, doc: dict[str, Any]) -> None:
    n = LLAMA_8B.num_layers
    par, train = doc["parallelism"], doc["training"]
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    world = dp * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]
    assert world == plan.num_gpus, "check: degrees multiply to the world size"
    mb = par.get("pipeline_parallel_microbatch_size", train["local_batch_size"])
    assert train["local_batch_size"] % mb == 0, "check: local batch divisible by micro-batch"
    assert train["global_batch_size"] % (train["local_batch_size"] * dp) == 0, (
        "check: global batch divisible by local batch x dp"
    )
    accumulation = train["global_batch_size"] // (train["local_batch_size"] * dp)
    assert accumulation * (train["local_batch_size"] // mb) == plan.num_microbatches
    assert mb == plan.micro_batch_size
    fqns = stage_fqns(doc, n)
    flat = [x for s in fqns for x in s]
    expected = ["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm", "output"]
    assert flat == expected, "check: the stages cover every module once, in order"
    assert len(fqns) == plan.pp * plan.vpp, "check: layers per stage x stages covers the model"
    want = [[f"layers.{i - 1}" for i in range(*s.layers) if 1 <= i <= n] for s in plan.stages]
    got = [[x for x in s if x.startswith("layers.")] for s in fqns]
    assert got == want


PLANS = {
    "fsdp tp": make_plan(tp=4, dp=2, zero=3, gbs=64),
    "ddp only": make_plan(dp=8, gbs=64),
    "pp4 1f1b even (layers_per_stage)": make_plan(tp=2, pp=4, gbs=32,
                                                  stages=ranges_from_decoders([8, 9, 8, 7])),
    "pp4 uneven (fqns)": make_plan(pp=4, gbs=32, stages=ranges_from_decoders([6, 9, 9, 8])),
    "interleaved": make_plan(pp=2, vpp=2, schedule="interleaved-1f1b", gbs=16,
                             stages=ranges_from_decoders([8, 8, 8, 8])),
    "zb-h1 one stage per rank": make_plan(pp=2, schedule="zb-h1", gbs=16),
    "zbv": make_plan(pp=2, vpp=2, schedule="zbv", gbs=16),
    "mbs 2 with gpipe": make_plan(pp=2, mbs=2, gbs=16, schedule="gpipe", recompute="full"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLANS))
def test_toml_loads_and_passes_torchtitans_checks(name: str) -> None:
    plan = PLANS[name]
    check(plan, load(plan))


def test_even_split_uses_layers_per_stage_and_uneven_writes_module_names() -> None:
    even = load(PLANS["pp4 1f1b even (layers_per_stage)"])["parallelism"]
    assert even["pipeline_parallel_layers_per_stage"] == 9
    assert "module_fqns_per_model_part" not in even
    uneven = load(PLANS["pp4 uneven (fqns)"])["parallelism"]
    assert "pipeline_parallel_layers_per_stage" not in uneven
    assert uneven["module_fqns_per_model_part"][0][:2] == ["tok_embeddings", "layers.0"]


@pytest.mark.parametrize(
    ("name", "schedule"),
    [("interleaved", "Interleaved1F1B"), ("zb-h1 one stage per rank", "InterleavedZeroBubble"),
     ("zbv", "ZBVZeroBubble"), ("mbs 2 with gpipe", "GPipe")],
)  # fmt: skip
def test_schedule_names_are_torchs(name: str, schedule: str) -> None:
    from torch.distributed.pipelining.schedules import get_schedule_class

    got = load(PLANS[name])["parallelism"]["pipeline_parallel_schedule"]
    assert got == schedule
    assert get_schedule_class(got).__name__ == f"Schedule{schedule}"


def test_data_parallel_is_ddp_for_zero0_and_fsdp_for_zero3() -> None:
    ddp = load(PLANS["ddp only"])["parallelism"]
    assert (ddp["data_parallel_replicate_degree"], ddp["data_parallel_shard_degree"]) == (8, 1)
    fsdp = load(PLANS["fsdp tp"])["parallelism"]
    assert (fsdp["data_parallel_replicate_degree"], fsdp["data_parallel_shard_degree"]) == (1, 2)


def test_zero1_is_not_a_torchtitan_concept() -> None:
    with pytest.raises(UnsupportedPlanError) as info:
        render(make_plan(dp=8, zero=1, gbs=64), Deployment(), target="torchrun",
               framework="torchtitan")  # fmt: skip
    assert "FSDP2" in info.value.reasons[0] and "ZeRO-3" in info.value.reasons[0]


def test_ddp_with_other_parallelism_is_refused() -> None:
    reasons = unsupported(make_plan(tp=2, dp=4, zero=0, gbs=64), "torchtitan")
    assert any("DDP has not supported > 1D parallelism" in r for r in reasons)


def test_mixed_recompute_is_refused_with_the_layers_named() -> None:
    per_layer = [["none"] * 17, ["none"] * 16 + ["none"]]
    per_layer[1][3] = "full"  # layer 20 = decoder.19
    plan = make_plan(pp=2, gbs=16, stages=[(0, 17), (17, 34)], per_layer=per_layer)
    reasons = unsupported(plan, "torchtitan")
    assert any("decoder.19 is 'full'" in r for r in reasons), reasons


def test_activation_checkpoint_mode_and_overrides_file() -> None:
    plan = make_plan(tp=2, dp=2, zero=3, gbs=16, recompute="selective", sp=True)
    bundle = render(plan, Deployment(steps=7), target="torchrun", framework="torchtitan")
    doc = tomllib.loads(bundle.file("torchtitan.toml").content)
    assert doc["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert doc["training"]["steps"] == 7
    lines = bundle.file("torchtitan-0.3-overrides.txt").content.splitlines()
    pairs = dict(shlex.split(line) for line in lines)
    assert pairs["--parallelism.data_parallel_shard_degree"] == "2"
    assert pairs["--activation_checkpoint.mode"] == "selective"
    assert "--job.config_file" in bundle.commands[0]
    assert any("op-level" in note for note in bundle.notes)
