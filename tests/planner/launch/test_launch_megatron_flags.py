"""Every flag the Megatron emitter writes is in the table of flags checked against Megatron-LM.

The table (planner.launch.frameworks.megatron_flags.FLAGS) was checked once against Megatron-LM's
own parser at the tags it names; docs/launch.md states it. A flag the emitter writes outside
the table (such as the `--overlap-p2p-comm` no release defines) fails here.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from launch_plans import (
    GPT_1B,
    LLAMA_8B,
    deepseek_v3_2048,
    llama3_405b_cp16,
    make_plan,
    mixtral_8x7b_64,
    qwen3_30b_capacity,
    ranges_from_decoders,
)

from planner.launch import Deployment, render
from planner.launch.frameworks.megatron_flags import FLAGS
from planner.plan import Plan

DOCS = Path(__file__).parents[3] / "docs" / "launch.md"

PLANS: list[Plan] = [
    make_plan(arch=LLAMA_8B, tp=2, pp=4, dp=2, sp=True, zero=1, recompute="full", gbs=64),
    make_plan(arch=GPT_1B, tp=1, pp=2, vpp=2, schedule="interleaved-1f1b", gbs=16,
              recompute="selective"),
    make_plan(pp=2, vpp=2, schedule="interleaved-1f1b",
              stages=ranges_from_decoders([8, 8, 8, 8])),  # layers per virtual stage
    make_plan(pp=4, stages=ranges_from_decoders([5, 9, 10, 8])),  # layout
    make_plan(pp=4, stages=ranges_from_decoders([6, 9, 9, 8])),  # decoder first/last
    make_plan(pp=3, gbs=48, stages=ranges_from_decoders([10, 11, 11])),  # account embedding
    make_plan(pp=3, gbs=48, stages=ranges_from_decoders([11, 11, 10])),  # account loss
    make_plan(pp=4, vpp=2, schedule="interleaved-1f1b",
              stages=ranges_from_decoders([3, 4, 4, 5, 3, 4, 4, 5])),  # virtual stages per rank
    make_plan(pp=2, stages=[(0, 17), (17, 34)],
              per_layer=[["full"] * 4 + ["none"] * 13, ["full"] * 3 + ["none"] * 14]),  # block
    mixtral_8x7b_64(),  # ep, MoE shapes, aux-loss routing
    llama3_405b_cp16(),  # cp
    deepseek_v3_2048(),  # MLA, shared experts, first dense layers, sigmoid with expert bias
    qwen3_30b_capacity(cp=2, ep=4),  # head_dim, capacity factor
]  # fmt: skip


def flags(plan: Plan, dep: Deployment) -> set[str]:
    command = render(plan, dep, target="torchrun", framework="megatron").commands[0]
    words = shlex.split(command)
    return {w for w in words[words.index("pretrain_gpt.py") + 1 :] if w.startswith("--")}


def test_every_emitted_flag_is_in_the_checked_table() -> None:
    emitted = set().union(*(flags(p, Deployment()) for p in PLANS))
    assert emitted <= set(FLAGS), sorted(emitted - set(FLAGS))
    assert emitted == set(FLAGS), sorted(set(FLAGS) - emitted)  # no stale entry in the table


def test_no_release_defines_overlap_p2p_comm() -> None:
    interleaved_pp2 = make_plan(pp=2, vpp=2, schedule="interleaved-1f1b", gbs=16)
    assert "--overlap-p2p-comm" not in flags(interleaved_pp2, Deployment())
    assert "--overlap-p2p-comm" not in FLAGS


def test_the_docs_state_the_same_table() -> None:
    rows = re.findall(r"^\| `(--[a-z0-9-]+)` \| (core_v[0-9.]+)\+ \|$", DOCS.read_text(), re.M)
    assert dict(rows) == FLAGS
