"""Shared requests of the search tests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from planner.cost import CostSource, resolve_costs
from planner.search.space import Config, enumerate_groups
from planner.specs import PlanRequest

# How far past search.time_limit_s a search with a clock may end: the step begun just before
# the limit (one partition simulated, one CP-SAT model loaded, one group's floors) after the
# driver's reserve, plus the scheduling of a shared machine.
SLACK_S = 0.5

GPT_13B: dict[str, Any] = {
    "family": "gpt",
    "name": "gpt-13b",
    "num_layers": 40,
    "hidden_size": 5120,
    "num_attention_heads": 40,
    "vocab_size": 51200,
}

# 128 decoder blocks: too deep to prove on 512 GPUs within a few seconds
DEEP: dict[str, Any] = {
    "family": "gpt",
    "name": "deep-128",
    "num_layers": 128,
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "vocab_size": 51200,
}

# 2 decoder blocks, 4 heads of 2 kv heads: tp in {1, 2} (the folded-space and folded-plan
# tests' model)
TINY: dict[str, Any] = {
    "family": "llama",
    "name": "tiny",
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "ffn_hidden_size": 128,
    "vocab_size": 256,
}
# 4 experts of width 96 (3 x 32: etp 1, 2 or 4 would divide 96; 8 would not)
TINY_MOE: dict[str, Any] = {
    **TINY,
    "name": "tiny-moe",
    "moe": {"num_experts": 4, "experts_per_token": 2, "moe_ffn_hidden_size": 96},
}


def gpt_request(**over: Any) -> PlanRequest:
    """GPT-13B-shaped on 64 A100s, global batch 512, 76 GiB cap; `over` replaces top-level
    fields (model, cluster, training, constraints, objective, search)."""
    doc: dict[str, Any] = {
        "model": GPT_13B,
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_length": 2048},
        "constraints": {"memory_cap_gib": 76},
        "search": {"time_limit_s": 30},
    }
    doc.update(over)
    return PlanRequest.model_validate(doc)


LLAMA: dict[str, Any] = {
    "family": "llama",
    "name": "llama-1b",
    "num_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "ffn_hidden_size": 8192,
    "vocab_size": 32000,
}


def framework_request(
    framework: str | None, model: dict[str, Any] = LLAMA, **constraints: object
) -> PlanRequest:
    """`model` on 16 H100s, global batch 24 of 2,048 tokens, for `framework`."""
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8},
            "training": {"global_batch_size": 24, "seq_length": 2048},
            "constraints": {"framework": framework, **constraints},
        }
    )


def sampled_groups(
    request: PlanRequest, limit: int, members_each: int
) -> Iterator[tuple[CostSource, list[Config], list[Config]]]:
    """Up to `limit` sweep groups of `request` drawn at random (seeded), each with up to
    `members_each` of its members drawn and every zbv one (its own representative in
    sweep_floors.group_floors): (cost source, group, members picked) — the sample the kind-floor
    tests compare a group's floor against its members' own PartitionInputs on."""
    src = resolve_costs(request)
    groups = enumerate_groups(request, num_layers=len(src.layers))
    rng = random.Random(0)
    rng.shuffle(groups)
    for members in groups[:limit]:
        picked = members if len(members) <= members_each else rng.sample(members, members_each)
        yield src, members, [*picked, *(c for c in members if c.schedule == "zbv")]


class JumpClock:
    """Reads 0 for its first `calls` reads, then a time far past any limit: the search is out
    of time from a known step on, whatever the machine's load."""

    def __init__(self, calls: int) -> None:
        self.left = calls

    def __call__(self) -> float:
        self.left -= 1
        return 0.0 if self.left >= 0 else 1e9


def deep_request(limit: float) -> PlanRequest:
    """A 128-layer GPT on 512 A100s: ~5,000 configurations, which no search proves within
    `limit` (s) of a clock that jumps past it (JumpClock) early."""
    return gpt_request(
        model=DEEP,
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 512, "gpus_per_node": 8},
        training={"global_batch_size": 1024, "seq_length": 2048},
        search={"time_limit_s": limit, "top_k": 0},
    )
