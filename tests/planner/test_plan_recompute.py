"""Plan.recompute says what the stages do: one mode of every decoder block, or 'mixed' with
the count of blocks per mode; plans stored with the search's predominant mode load summarised."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from planner.cost import fixed_plan
from planner.plan import Plan
from planner.specs import Candidate, PlanRequest

REQUEST = PlanRequest.model_validate(
    {
        "model": {
            "family": "gpt",
            "name": "tiny-gpt",
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1024,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_length": 256},
    }
)


def _plan_doc(stages: list[dict[str, Any]], recompute: str = "none") -> dict[str, Any]:
    cand = Candidate(tp=1, pp=2, dp=2, micro_batch_size=1)
    doc = fixed_plan(REQUEST, cand).model_dump(mode="json")
    doc.pop("recompute_blocks")
    return {**doc, "stages": stages, "recompute": recompute}


def test_mixed_blocks_say_mixed_whatever_was_stored() -> None:
    stages = [
        {"layers": [0, 3], "recompute": ["none", "selective", "selective"]},
        {"layers": [3, 6], "recompute": ["none", "full", "full"]},
    ]
    plan = Plan.model_validate(_plan_doc(stages, recompute="none"))
    assert plan.recompute == "mixed"
    assert plan.recompute_blocks == {"none": 1, "selective": 2, "full": 1}
    assert plan.predominant_recompute == "selective"
    # the candidate keeps every layer's mode
    cand = plan.candidate()
    assert cand.stages is not None and cand.stages[1].recompute == ("none", "full", "full")


def test_edges_do_not_count() -> None:
    stages = [
        {"layers": [0, 3], "recompute": ["full", "selective", "selective"]},
        {"layers": [3, 6], "recompute": ["selective", "selective", "none"]},
    ]
    plan = Plan.model_validate(_plan_doc(stages))
    assert plan.recompute == "selective" and plan.recompute_blocks == {"selective": 4}


def test_a_stage_without_modes_takes_the_plans_mode() -> None:
    stages = [{"layers": [0, 3]}, {"layers": [3, 6], "recompute": ["full"] * 3}]
    plan = Plan.model_validate(_plan_doc(stages, recompute="full"))
    assert plan.stages[0].recompute == ("full", "full", "full")
    assert plan.recompute == "full" and plan.recompute_blocks == {"full": 4}
    with pytest.raises(ValidationError, match=r"stages\[0\].*no per-layer recompute"):
        Plan.model_validate(_plan_doc(stages, recompute="mixed"))


def test_round_trip_is_stable() -> None:
    stages = [
        {"layers": [0, 2], "recompute": ["none", "full"]},
        {"layers": [2, 6], "recompute": ["none", "none", "selective", "none"]},
    ]
    plan = Plan.model_validate(_plan_doc(stages))
    assert Plan.model_validate_json(plan.model_dump_json()) == plan
    assert plan.gpus_per_node == 4
