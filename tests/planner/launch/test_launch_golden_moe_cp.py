"""Golden Slurm launches of the published MoE and long-context plans (reviewed by eye once):
Mixtral 8x7B TP1 EP8 PP4 VP8 on 64 GPUs and Llama 3 405B TP8 CP16 PP16 DP4, for every
framework that expresses them; the others' refusals are golden too.

Refresh after an intended change with: MESHPLAN_UPDATE_GOLDEN=1 pytest tests/planner/launch
"""

from __future__ import annotations

import os

import pytest
from golden_support import GOLDEN, flatten
from launch_plans import llama3_405b_cp16, mixtral_8x7b_64, qwen3_30b_capacity

from planner.launch import FRAMEWORKS, Deployment, render, unsupported

PLANS = {"mixtral-8x7b-ep8": mixtral_8x7b_64(), "llama3-405b-cp16": llama3_405b_cp16()}


@pytest.mark.parametrize("name", list(PLANS))
def test_moe_cp_launch_matches_golden(name: str) -> None:
    plan = PLANS[name]
    parts = []
    for framework in FRAMEWORKS:
        reasons = unsupported(plan, framework)
        if reasons:
            parts.append(f"##### {framework}: unsupported\n" + "\n".join(reasons) + "\n")
            continue
        bundle = render(plan, Deployment(gpus_per_node=8), target="slurm", framework=framework)
        parts.append(f"##### {framework}\n{flatten(bundle)}")
    text = "\n".join(parts)
    path = GOLDEN / f"slurm-{name}.txt"
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing; run with MESHPLAN_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{path.name} differs; refresh with MESHPLAN_UPDATE_GOLDEN=1"


def test_megatron_writes_the_published_degrees() -> None:
    mixtral = render(mixtral_8x7b_64(), Deployment(), target="torchrun", framework="megatron")
    words = mixtral.commands[0].split()
    pairs = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert pairs["--expert-model-parallel-size"] == "8"
    assert pairs["--expert-tensor-parallel-size"] == "1"
    assert pairs["--num-layers-per-virtual-pipeline-stage"] == "1"  # 32 blocks / (4 x 8)
    assert (pairs["--num-experts"], pairs["--moe-router-topk"]) == ("8", "2")
    llama = render(llama3_405b_cp16(), Deployment(), target="torchrun", framework="megatron")
    words = llama.commands[0].split()
    pairs = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert (pairs["--context-parallel-size"], pairs["--cp-comm-type"]) == ("16", "all_gather")
    assert pairs["--tensor-model-parallel-size"] == "8"
    assert "--num-experts" not in pairs


def test_megatron_cp_without_tp_sets_one_cuda_connection() -> None:
    """validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for cp > 1 as for tp > 1 (found by
    running Megatron-LM core_v0.16.1's validate_args on this plan)."""
    plan = qwen3_30b_capacity(cp=2, ep=4)
    bundle = render(plan, Deployment(), target="torchrun", framework="megatron")
    assert bundle.commands[0].startswith("OMP_NUM_THREADS=1 CUDA_DEVICE_MAX_CONNECTIONS=1 ")
