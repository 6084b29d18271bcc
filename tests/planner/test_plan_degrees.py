"""Plan's context and expert parallel degrees: Megatron-Core's folding rules, and plans
without them loading and dumping exactly as before the fields existed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).parent / "launch"))
from launch_plans import LLAMA_8B, make_plan

from planner.catalog.models import PRESETS
from planner.plan import Plan

MIXTRAL = PRESETS["mixtral-8x7b"]


def test_a_plan_without_the_degrees_dumps_and_loads_unchanged() -> None:
    plan = make_plan(tp=2, pp=2, dp=2)
    doc = json.loads(plan.model_dump_json())
    assert not {"cp", "ep", "etp"} & set(doc)
    again = Plan.model_validate(doc)
    assert (again.cp, again.ep, again.etp, again.edp) == (1, 1, 1, 4)
    assert again.model_dump_json() == plan.model_dump_json()


def test_degrees_above_one_are_written_and_read_back() -> None:
    plan = make_plan(arch=MIXTRAL, tp=2, cp=2, dp=2, ep=4, etp=1, gbs=64)
    doc = json.loads(plan.model_dump_json())
    assert (doc["cp"], doc["ep"]) == (2, 4)
    assert "etp" not in doc  # etp = 1 is the default
    again = Plan.model_validate(doc)
    assert (again.cp, again.ep, again.etp, again.edp) == (2, 4, 1, 2)
    assert again.world_size == plan.num_gpus == 8


def test_expert_grid_must_tile_the_attention_grid() -> None:
    with pytest.raises(
        ValidationError, match=r"etp\*ep = 1\*8 = 8 must divide tp\*cp\*dp = 2\*1\*2 = 4"
    ):
        make_plan(arch=MIXTRAL, tp=2, dp=2, ep=8)


def test_ep_must_divide_the_experts() -> None:
    with pytest.raises(
        ValidationError, match=r"ep=3 must divide moe.num_experts=8 \(remainder 2\)"
    ):
        make_plan(arch=MIXTRAL, dp=3, ep=3, gbs=63)


def test_ep_needs_a_model_with_moe() -> None:
    with pytest.raises(
        ValidationError, match="ep=2, etp=1: expert parallelism needs a model with moe"
    ):
        make_plan(arch=LLAMA_8B, dp=2, ep=2)
    with pytest.raises(ValidationError, match=r"etp=2: .*\(no arch\)"):
        make_plan(arch=None, tp=2, etp=2)


def test_cp_splits_the_sequence_into_2cp_chunks() -> None:
    with pytest.raises(
        ValidationError,
        match=r"cp=3: seq_length=4096 must split into 2\*cp = 6 equal chunks \(remainder 4\)",
    ):
        make_plan(cp=3)
    assert make_plan(cp=4, seq=4096).cp == 4


def test_cp_comm_is_written_only_when_not_the_ring() -> None:
    plan = make_plan(cp=2)
    assert "cp_comm" not in json.loads(plan.model_dump_json())
    gathered = plan.model_copy(update={"cp_comm": "all_gather"})
    doc = json.loads(gathered.model_dump_json())
    assert doc["cp_comm"] == "all_gather"
    assert Plan.model_validate(doc).cp_comm == "all_gather"
