"""Random small requests with context parallelism (a dense model) or experts (a tiny MoE
model), for the optimal mode against the exhaustive oracle (bench/solver_vs_exhaustive.py
kinds `cp` and `moe`; a sample in test_vs_exhaustive_folded.py).

The models are analytic (the catalog costs them), 2 or 3 decoder blocks (4-5 layers with the
embedding and head: the oracle's |modes|^L partitions stay few), on 2-8 GPUs. The sizes make
memory bind at the drawn caps: hidden 1,024 at sequences of 2K-4K hold 10-100 MiB of
activations a layer, against caps of 0.6-80 GiB.
"""

from __future__ import annotations

import random
from typing import Any

from planner.specs import PlanRequest

FOLDED_KINDS = ("cp", "moe")


def _arch(rng: random.Random, *, moe: bool) -> dict[str, Any]:
    heads = rng.choice([8, 16])
    arch: dict[str, Any] = {
        "family": rng.choice(["llama", "gpt"]),
        "name": "tiny-moe" if moe else "tiny",
        "num_layers": rng.randint(2, 3),
        "hidden_size": 1024,
        "num_attention_heads": heads,
        "num_kv_heads": rng.choice([heads, heads // 4]),
        "ffn_hidden_size": 2816,
        "vocab_size": rng.choice([8192, 32000]),
    }
    if arch["family"] == "gpt":
        arch["attention_kernel"] = "flash"  # context parallelism needs a fused core
    if moe:
        experts = rng.choice([2, 4, 8])
        arch["moe"] = {
            "num_experts": experts,
            "experts_per_token": rng.randint(1, min(2, experts)),
            "moe_ffn_hidden_size": rng.choice([512, 1024]),
            "num_shared_experts": rng.choice([0, 1]),
            "first_dense_layers": rng.choice([0, 1]),
        }
    return arch


def random_folded_request(rng: random.Random, kind: str) -> PlanRequest:
    """A request of `kind` ("cp": a dense model, cp searched; "moe": a tiny MoE model, ep,
    etp and cp searched)."""
    if kind not in FOLDED_KINDS:
        raise ValueError(f"kind {kind!r}: one of {FOLDED_KINDS}")
    moe = kind == "moe"
    num_gpus = rng.choice([2, 4, 8])
    schedules = rng.sample(["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"], 2)
    cap = rng.choice([80.0, rng.uniform(4, 16), rng.uniform(0.6, 4)])
    return PlanRequest.model_validate(
        {
            "model": _arch(rng, moe=moe),
            "cluster": {
                "gpu": "H100-SXM-80GB",
                "num_gpus": num_gpus,
                "gpus_per_node": rng.choice([4, 8]),
            },
            "training": {
                "global_batch_size": rng.choice([4, 8]),
                "seq_length": rng.choice([2048, 4096]),
            },
            "constraints": {
                "memory_cap_gib": cap,
                "memory_reserve_gib": 0.25,
                "schedules": schedules,
                "micro_batch_sizes": [1, 2],
                "zero_stages": [0, 1],
                "vpp": [1, 2],
                "cp": [1, 2, 4],
                "tp": [1, 2],
            },
            "search": {"mode": "optimal", "time_limit_s": 600, "top_k": 0},
        }
    )
