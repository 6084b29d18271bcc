"""Plans the planner itself searches with `constraints.framework` set, over varied requests.

The model is torchtitan's llama3 "debugmodel" shape (6 blocks, dim 256, 16 heads, vocab 2048),
so that torchtitan's own `llama3_debugmodel` config function builds the same model; it is small
enough that each search takes well under a second. The requests vary tp, pp, vpp (through the
interleaved and zbv schedules), micro-batch size, recompute, ZeRO and sequence parallel.
"""

from __future__ import annotations

import functools
from typing import Any

from planner.errors import InfeasibleError
from planner.plan import Plan
from planner.search import search
from planner.specs import PlanRequest

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")

DEBUGMODEL: dict[str, Any] = {
    "family": "llama",
    "name": "llama3-debugmodel",
    "num_layers": 6,
    "hidden_size": 256,
    "num_attention_heads": 16,
    "ffn_hidden_size": 768,
    "vocab_size": 2048,
}
ALL_SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"]

# name -> (num_gpus, constraints)
REQUESTS: dict[str, tuple[int, dict[str, Any]]] = {
    "tp2 pp2": (16, {"tp": [2], "pp": [2]}),
    "pp4 any schedule": (8, {"pp": [4], "tp": [1], "schedules": ALL_SCHEDULES}),
    "pp2 vpp2 or 3": (4, {"pp": [2], "vpp": [1, 2, 3], "schedules": ALL_SCHEDULES}),
    "pp3 mbs2": (6, {"pp": [3], "micro_batch_sizes": [2]}),
    "full recompute": (8, {"pp": [2], "recompute": ["full"]}),
    "selective recompute": (8, {"tp": [2], "recompute": ["selective"]}),
    "any recompute, tight memory": (
        4,
        {"pp": [2], "memory_cap_gib": 1.5, "memory_reserve_gib": 0.25},
    ),
    "zero3 pp1": (8, {"pp": [1], "tp": [1], "zero_stages": [3]}),
    "zero1 pp2": (8, {"pp": [2], "zero_stages": [1]}),
    "zero0 with dp, tp and pp": (16, {"pp": [2], "tp": [2], "zero_stages": [0]}),
    "sequence parallel asked": (8, {"tp": [4], "sequence_parallel": True}),
    "sequence parallel off": (8, {"tp": [2], "sequence_parallel": False}),
    "tp4": (8, {"tp": [4]}),  # alternatives differ in mbs and ZeRO too, not only in degrees
}


def request(framework: str, name: str) -> PlanRequest:
    num_gpus, constraints = REQUESTS[name]
    return PlanRequest.model_validate(
        {
            "model": DEBUGMODEL,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": num_gpus, "gpus_per_node": 8},
            "training": {"global_batch_size": 32, "seq_length": 2048},
            "constraints": {"framework": framework, **constraints},
        }
    )


@functools.cache
def searched(framework: str, name: str) -> tuple[Plan, ...] | None:
    """The best plan and its alternatives, or None when the search finds none."""
    try:
        result = search(request(framework, name))
    except InfeasibleError:
        return None
    return (result.plan, *result.alternatives)


def cases(framework: str) -> list[tuple[str, int, Plan]]:
    """(request name, index among the result's plans, plan) for every plan found."""
    out = []
    for name in REQUESTS:
        for i, plan in enumerate(searched(framework, name) or ()):
            out.append((name, i, plan))
    return out
