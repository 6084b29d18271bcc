"""planner.search.kinds.kind_memory_floor_bytes against every member of each sweep group:
at most group_memory_floor_bytes of the member's own (restricted) PartitionInputs (built
with its schedule's in-flight counts, and with the group's least ones), and, where there
are no cp / ep exchange buffers (the one term it leaves out), equal to the least of them: a
change to planner.cost.inputs' memory terms that kinds.py does not follow fails here.
Random profile, cp, MoE (llama and tied gpt) and bench requests (dense, tied GPT-3, MoE,
cp)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from planner.cost import partition_inputs
from planner.errors import SpecError
from planner.search.bounds import (
    group_memory_floor_bytes,
    least_inflight,
    restricted,
)
from planner.search.kinds import group_memory_key, kind_memory_floor_bytes
from planner.specs import PlanRequest

from .helpers import sampled_groups
from .random_folded import random_folded_request
from .random_requests import random_request

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _check(request: PlanRequest, limit: int, members_each: int = 6) -> int:
    """Compares up to `limit` groups (drawn at random), each against up to `members_each`
    of its members (every member where the group is that small); returns the members
    compared."""
    compared = 0
    for src, members, picked in sampled_groups(request, limit, members_each):
        key = group_memory_key(members)
        try:
            floor = kind_memory_floor_bytes(request, src, members[0], shared=key[-1])
        except (SpecError, ValueError):
            continue
        # the least member's group floor: every zbv member and the least-vpp plain one
        # (the representatives of sweep_floors.group_floors) are always among those compared
        plain = [c for c in members if c.schedule != "zbv"]
        if plain:
            picked.append(min(plain, key=lambda c: c.vpp))
        least = math.inf
        for cfg in picked:
            given = least_inflight(cfg.schedule, cfg.pp, cfg.num_microbatches)
            try:
                rin = partition_inputs(request, cfg.candidate(), source=src, given_inflight=given)
                own = partition_inputs(request, cfg.candidate(), source=src)
            except SpecError:
                continue
            group = group_memory_floor_bytes(restricted(rin, cfg.modes))
            assert floor <= group * (1 + 1e-12), cfg.describe()
            # the member's own inputs (its schedule's in-flight counts and held points)
            assert floor <= group_memory_floor_bytes(restricted(own, cfg.modes)) * (1 + 1e-12)
            least = min(least, group)
            compared += 1
        first = members[0]
        if least < math.inf and first.cp == first.ep == first.etp == 1:
            assert floor == pytest.approx(least, rel=1e-9), first.describe()
    return compared


@pytest.mark.parametrize(
    "name",
    [
        "moe-qwen3-235b-a22b-256xh100",
        "cp-llama3-405b-131k-8192xh100",
        "gpt3-175b-3072xh100-zero-bubble",
        "llama3-405b-8192xh100-bubble-megatron",
        "llama2-7b-8xa100",
    ],
)
def test_kind_memory_floor_on_bench_requests(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    assert _check(request, 40, members_each=3) >= 40


def test_kind_memory_floor_on_random_requests() -> None:
    compared = sum(_check(random_request(random.Random(f"m-{i}")), 30) for i in range(15))
    assert compared >= 100


@pytest.mark.parametrize("kind", ["cp", "moe"])
def test_kind_memory_floor_on_random_folded_requests(kind: str) -> None:
    compared = sum(
        _check(random_folded_request(random.Random(f"m-{kind}-{i}"), kind), 30) for i in range(12)
    )
    assert compared >= 100
