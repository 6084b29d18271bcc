"""The diagnosis of an infeasible search names the limit that really binds: the framework's
stage split when no configuration can have it, memory (under that split) only when the least
peak exceeds the cap."""

from __future__ import annotations

from typing import Any

import pytest

from planner.errors import InfeasibleError
from planner.search import search
from planner.specs import PlanRequest

# What DeepSpeed allows besides its stage split, spelled out as constraints (capabilities:
# 1F1B, recompute none|full for every layer alike, no sequence parallel)
LIKE_DEEPSPEED = {
    "schedules": ["1f1b"],
    "recompute": ["none", "full"],
    "uniform_recompute": True,
    "sequence_parallel": False,
}


def _request(num_layers: int, num_gpus: int, **constraints: Any) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": {
                "family": "gpt",
                "name": "gpt",
                "num_layers": num_layers,
                "hidden_size": 2048,
                "num_attention_heads": 16,
                "vocab_size": 51200,
            },
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": num_gpus, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "seq_length": 2048},
            "constraints": constraints,
            "search": {"time_limit_s": 10},
        }
    )


def _diagnosis(req: PlanRequest) -> dict[str, Any]:
    with pytest.raises(InfeasibleError) as info:
        search(req)
    return info.value.diagnosis


def test_deepspeed_with_30_layers_over_pp_4_is_bound_by_the_stage_split() -> None:
    # the request: an 80 GiB cap that memory never reaches
    d = _diagnosis(_request(30, 32, memory_cap_gib=80, pp=[4], framework="deepspeed"))
    assert d["binding"] == "stage_split"
    assert d["framework"] == "deepspeed" and d["stage_split"] == "uniform"
    assert d["decoder_layers"] == 30 and d["stage_counts"] == [4]
    assert "over_by_gib" not in d
    assert "30 decoder layers" in d["message"] and "[4] stages" in d["message"]
    # pp values that divide both 30 layers and 32 GPUs: 1 and 2
    assert any("[1, 2]" in tip for tip in d["suggestions"])
    # the same request for Megatron-LM (explicit boundaries) has a plan
    assert search(_request(30, 32, memory_cap_gib=80, pp=[4], framework="megatron")).plan.pp == 4


def test_memory_binds_under_the_split_it_is_measured_with() -> None:
    """A cap between the least peak of any stage split and that of DeepSpeed's equal split:
    the same space without the split has a plan; DeepSpeed's is over the cap by a positive
    amount (it said -74.7 GiB when the peak ignored the split)."""
    tight = {"pp": [4], "tp": [1], "micro_batch_sizes": [1]}
    free = _diagnosis(_request(32, 8, memory_cap_gib=1.5, **tight, **LIKE_DEEPSPEED))
    equal = _diagnosis(_request(32, 8, memory_cap_gib=1.5, **tight, framework="deepspeed"))
    assert free["binding"] == equal["binding"] == "memory"
    assert equal["stage_split"] == "uniform" and "stage_split" not in free
    assert equal["lowest_peak_gib"] > free["lowest_peak_gib"]  # the split costs memory
    between = (free["lowest_peak_gib"] + equal["lowest_peak_gib"]) / 2
    cap_gib = 1.5 + between - free["cap_gib"]  # memory_cap_gib giving that usable cap
    plan = search(_request(32, 8, memory_cap_gib=cap_gib, **tight, **LIKE_DEEPSPEED)).plan
    assert plan.prediction.peak_memory_bytes <= plan.prediction.memory_cap_bytes
    d = _diagnosis(_request(32, 8, memory_cap_gib=cap_gib, **tight, framework="deepspeed"))
    assert d["binding"] == "memory" and d["over_by_gib"] > 0
    assert d["lowest_peak_gib"] == pytest.approx(equal["lowest_peak_gib"])


@pytest.mark.parametrize("framework", [None, "megatron", "torchtitan", "deepspeed"])
def test_a_memory_diagnosis_is_always_over_the_cap(framework: str | None) -> None:
    cons: dict[str, Any] = {"memory_cap_gib": 2, "pp": [2, 4], "tp": [1, 2]}
    if framework is not None:
        cons["framework"] = framework
    d = _diagnosis(_request(32, 8, **cons))
    assert d["binding"] == "memory"
    assert d["over_by_gib"] > 0 and d["lowest_peak_gib"] > d["cap_gib"]
