"""planner.search.kinds.kind_post_floor_s against every member of each sweep group: at most
sum(post_s) of the member's own PartitionInputs (the DP gradient sync and optimizer step
that bounds.group_time_floor_s averages over the ranks), and, without tied embeddings (the
one term it may leave out), equal to every member's: a change to planner.cost.inputs' post
terms that kinds.py does not follow fails here. Random profile, cp, MoE (llama and tied
gpt) and bench requests (dense, tied GPT-3, MoE, cp, ZeRO-2/3 at pp = 1)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planner.cost import partition_inputs
from planner.errors import SpecError
from planner.search.kinds import group_post_key, kind_post_floor_s
from planner.specs import PlanRequest

from .helpers import sampled_groups
from .random_folded import random_folded_request
from .random_requests import random_request

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _check(request: PlanRequest, limit: int, members_each: int = 4) -> int:
    """Compares up to `limit` groups (drawn at random), each against up to `members_each`
    of its members and every zbv one; returns the members compared."""
    compared = 0
    for src, members, picked in sampled_groups(request, limit, members_each):
        tied = src.arch is not None and src.arch.tied
        key = group_post_key(members)
        try:
            floor = kind_post_floor_s(request, src, members[0], shared=key[-1])
        except (SpecError, ValueError):
            continue
        for cfg in picked:
            try:
                own = partition_inputs(request, cfg.candidate(), source=src)
            except SpecError:
                continue
            post = sum(own.post_s)
            assert floor <= post, cfg.describe()
            if not tied:
                assert floor == post, cfg.describe()
            compared += 1
    return compared


@pytest.mark.parametrize(
    "name",
    [
        "moe-qwen3-235b-a22b-256xh100",
        "moe-mixtral-8x7b-64xh100",
        "cp-llama3-405b-131k-8192xh100",
        "gpt3-175b-3072xh100-zero-bubble",
        "llama2-7b-64xh100-deepspeed-cap40",
        "llama2-7b-8xa100",
    ],
)
def test_kind_post_floor_on_bench_requests(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    assert _check(request, 40, members_each=3) >= 40


def test_kind_post_floor_on_random_requests() -> None:
    compared = sum(_check(random_request(random.Random(f"p-{i}")), 30) for i in range(15))
    assert compared >= 100


@pytest.mark.parametrize("kind", ["cp", "moe"])
def test_kind_post_floor_on_random_folded_requests(kind: str) -> None:
    compared = sum(
        _check(random_folded_request(random.Random(f"p-{kind}-{i}"), kind), 30) for i in range(12)
    )
    assert compared >= 100
