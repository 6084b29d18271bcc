"""planner.search.kinds.kind_work against the PartitionInputs it stands for: W and C equal
bounds.work_s and bounds.chain_s of the built inputs (a change to planner.cost.inputs' times
that kinds.py does not follow fails here), on MoE, cp and dense requests, every kind."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planner.cost import partition_inputs, resolve_costs
from planner.errors import SpecError
from planner.search.bounds import chain_s, least_inflight, work_s
from planner.search.kinds import kind_key, kind_work
from planner.search.space import Config, enumerate_configs
from planner.specs import PlanRequest

from .random_folded import random_folded_request

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _kinds(request: PlanRequest, limit: int) -> list[Config]:
    src = resolve_costs(request)
    seen: dict[object, Config] = {}
    for cfg in enumerate_configs(request, num_layers=len(src.layers)):
        seen.setdefault(kind_key(cfg), cfg)
    kinds = list(seen.values())
    random.Random(0).shuffle(kinds)
    return kinds[:limit]


def _check(request: PlanRequest, limit: int) -> int:
    src = resolve_costs(request)
    compared = 0
    for cfg in _kinds(request, limit):
        least = least_inflight(cfg.schedule, cfg.pp, cfg.num_microbatches)
        try:
            rin = partition_inputs(request, cfg.candidate(), source=src, given_inflight=least)
        except SpecError:
            continue
        assert kind_work(request, src, cfg) == (work_s(rin), chain_s(rin)), cfg.describe()
        compared += 1
    return compared


@pytest.mark.parametrize(
    "name",
    [
        "moe-mixtral-8x7b-64xh100",
        "moe-qwen3-30b-a3b-8xh100",
        "cp-llama3-405b-131k-8192xh100",
        "cp-llama3.1-8b-32k-8xh100-torchtitan",
        "llama2-7b-8xa100",
    ],
)
def test_kind_work_equals_the_inputs_on_bench_requests(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    assert _check(request, 60) >= 20


@pytest.mark.parametrize("kind", ["cp", "moe"])
def test_kind_work_equals_the_inputs_on_random_folded_requests(kind: str) -> None:
    compared = sum(
        _check(random_folded_request(random.Random(f"k-{kind}-{i}"), kind), 40) for i in range(12)
    )
    assert compared >= 50
