"""torchtitan 0.3.x command lines pass torchtitan's checks, re-derived (no torchtitan needed).

Checks re-derived from torchtitan 0.3.0 (distributed/pipeline_parallel.py
`_get_pipeline_metadata`, `_build_pipeline_schedule`, `_generate_llm_fqn_per_model_part`,
trainer.py `Trainer.Config`), each named; tests/frameworks loads the same options with
torchtitan's own ConfigManager.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

import pytest
from launch_plans import GPT_1B, LLAMA_8B, make_plan, ranges_from_decoders

from planner.errors import UnsupportedPlanError
from planner.launch import Deployment, render, unsupported
from planner.plan import Plan

SINGLE = {"GPipe", "1F1B"}
OUT = ["norm", "lm_head"]


def titan_split(num_stages: int, n: int) -> list[list[str]]:
    """torchtitan's default split, from its docstring: embedding and output weigh one layer,
    effective layers spread evenly, the first `extra` stages one more."""
    if num_stages == 1:
        return [["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm", "lm_head"]]
    per, extra = divmod(n + 2, num_stages)
    names = ["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm+lm_head"]
    out, pos = [], 0
    for s in range(num_stages):
        size = per + (s < extra)
        chunk = names[pos : pos + size]
        pos += size
        out.append([x for c in chunk for x in (OUT if c == "norm+lm_head" else [c])])
    return out


def load(plan: Plan, dep: Deployment | None = None) -> dict[str, Any]:
    """The options after `-m torchtitan.train`: {"--key": [values]}, plus the AC subcommand."""
    bundle = render(plan, dep or Deployment(), target="torchrun", framework="torchtitan")
    words = shlex.split(bundle.commands[0])
    words = words[words.index("torchtitan.train") + 1 :]
    out: dict[str, Any] = {}
    key = None
    for w in words:
        if w.startswith("--"):
            key = w
            out[key] = []
        elif w.startswith("activation-checkpoint:"):
            out["subcommand"] = w
            key = None
        else:
            assert key is not None, w
            out[key].append(w)
    return out


def one(doc: dict[str, Any], key: str) -> int:
    (value,) = doc[key]
    return int(value)


def stage_fqns(doc: dict[str, Any], n: int) -> list[list[str]]:
    if "--parallelism.module-fqns-per-model-part" in doc:
        return [g.split(",") for g in doc["--parallelism.module-fqns-per-model-part"]]
    if one(doc, "--parallelism.pipeline-parallel-degree") == 1:
        return titan_split(1, n)
    k = one(doc, "--parallelism.pipeline-parallel-layers-per-stage")
    stages = math.ceil((n + 2) / k)
    pp = one(doc, "--parallelism.pipeline-parallel-degree")
    assert stages % pp == 0, "check: number of virtual stages divisible by pp"
    (schedule,) = doc["--parallelism.pipeline-parallel-schedule"]
    single = schedule in SINGLE
    assert (stages // pp == 1) if single else (stages // pp >= 2), (
        "check: single-stage schedule needs 1 stage per rank, multi-stage at least 2"
    )
    return titan_split(stages, n)


def check(plan: Plan, doc: dict[str, Any]) -> None:
    n = LLAMA_8B.num_layers
    assert doc["--module"] == ["llama3"] and doc["--config"] == ["llama3_8b"]
    dp = one(doc, "--parallelism.data-parallel-replicate-degree") * one(
        doc, "--parallelism.data-parallel-shard-degree"
    )
    pp = one(doc, "--parallelism.pipeline-parallel-degree")
    world = dp * one(doc, "--parallelism.tensor-parallel-degree") * pp
    assert world == plan.num_gpus, "check: degrees multiply to the world size"
    local = one(doc, "--training.local-batch-size")
    mb = one(doc, "--parallelism.pipeline-parallel-microbatch-size") if pp > 1 else local
    assert local % mb == 0, "check: local batch divisible by micro-batch"
    gbs = one(doc, "--training.global-batch-size")
    assert gbs % (local * dp) == 0, "check: global batch divisible by local batch x dp"
    assert (pp > 1) == ("--training.disable-cuda-graphs" in doc), "check: pp needs no CUDA graphs"
    accumulation = gbs // (local * dp)
    assert accumulation * (local // mb) == plan.num_microbatches
    assert mb == plan.micro_batch_size
    fqns = stage_fqns(doc, n)
    flat = [x for s in fqns for x in s]
    expected = ["tok_embeddings", *[f"layers.{i}" for i in range(n)], "norm", "lm_head"]
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
    "replicate with tp and pp": make_plan(tp=2, pp=2, dp=4, gbs=64),
    "mbs 2 with gpipe": make_plan(pp=2, mbs=2, gbs=16, schedule="gpipe", recompute="full"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLANS))
def test_options_pass_torchtitans_checks(name: str) -> None:
    plan = PLANS[name]
    check(plan, load(plan))


def test_even_split_uses_layers_per_stage_and_uneven_writes_module_names() -> None:
    even = load(PLANS["pp4 1f1b even (layers_per_stage)"])
    assert even["--parallelism.pipeline-parallel-layers-per-stage"] == ["9"]
    assert "--parallelism.module-fqns-per-model-part" not in even
    uneven = load(PLANS["pp4 uneven (fqns)"])
    assert "--parallelism.pipeline-parallel-layers-per-stage" not in uneven
    groups = uneven["--parallelism.module-fqns-per-model-part"]
    assert len(groups) == 4  # one comma-joined word per stage
    assert groups[0].split(",")[:2] == ["tok_embeddings", "layers.0"]


@pytest.mark.parametrize(
    ("name", "schedule"),
    [("interleaved", "Interleaved1F1B"), ("zb-h1 one stage per rank", "InterleavedZeroBubble"),
     ("zbv", "ZBVZeroBubble"), ("mbs 2 with gpipe", "GPipe")],
)  # fmt: skip
def test_schedule_names_are_torchs(name: str, schedule: str) -> None:
    pipelining = pytest.importorskip("torch.distributed.pipelining.schedules")
    (got,) = load(PLANS[name])["--parallelism.pipeline-parallel-schedule"]
    assert got == schedule
    assert pipelining.get_schedule_class(got).__name__ == f"Schedule{schedule}"


def degrees(doc: dict[str, Any]) -> tuple[int, int]:
    return (
        one(doc, "--parallelism.data-parallel-replicate-degree"),
        one(doc, "--parallelism.data-parallel-shard-degree"),
    )


def test_data_parallel_replicates_for_zero0_and_shards_for_zero3() -> None:
    assert degrees(load(PLANS["ddp only"])) == (8, 1)
    assert degrees(load(PLANS["fsdp tp"])) == (1, 2)
    assert degrees(load(PLANS["replicate with tp and pp"])) == (4, 1)


def test_zero1_is_not_a_torchtitan_concept() -> None:
    with pytest.raises(UnsupportedPlanError) as info:
        render(make_plan(dp=8, zero=1, gbs=64), Deployment(), target="torchrun",
               framework="torchtitan")  # fmt: skip
    assert "FSDP2" in info.value.reasons[0] and "ZeRO-3" in info.value.reasons[0]


def test_mixed_recompute_is_refused_with_the_layers_named() -> None:
    per_layer = [["none"] * 17, ["none"] * 16 + ["none"]]
    per_layer[1][3] = "full"  # layer 20 = decoder.19
    plan = make_plan(pp=2, gbs=16, stages=[(0, 17), (17, 34)], per_layer=per_layer)
    reasons = unsupported(plan, "torchtitan")
    assert any("decoder.19 is 'full'" in r for r in reasons), reasons


def test_activation_checkpoint_subcommand_sequence_parallel_and_steps() -> None:
    plan = make_plan(tp=2, dp=2, zero=3, gbs=16, recompute="selective", sp=True)
    bundle = render(plan, Deployment(steps=7), target="torchrun", framework="torchtitan")
    words = shlex.split(bundle.commands[0])
    assert words[-1] == "activation-checkpoint:selective"  # a subcommand: after every option
    doc = load(plan, Deployment(steps=7))
    assert doc["--training.steps"] == ["7"]
    assert "--parallelism.enable-sequence-parallel" in doc
    off = load(make_plan(tp=2, dp=2, zero=3, gbs=16, sp=False))
    assert "--parallelism.no-enable-sequence-parallel" in off
    assert off["subcommand"] == "activation-checkpoint:none"
    assert any("op-level" in note for note in bundle.notes)


def test_shapes_without_a_torchtitan_config_say_so() -> None:
    plan = make_plan(arch=GPT_1B, tp=2, gbs=8)
    bundle = render(plan, Deployment(), target="torchrun", framework="torchtitan")
    assert load(plan)["--config"] == ["llama3_meshplan"]
    assert any("llama3_meshplan" in note for note in bundle.notes)
    named = load(plan, Deployment(torchtitan_flavor="debugmodel"))
    assert named["--config"] == ["llama3_debugmodel"]
