"""The expert floor (kinds.expert_work per (tp, mbs, sp, cp, ep, etp), sweep_floors.expert_floor per
group) is never above what it stands for: kind_work of every kind under its key (random tiny
MoE requests over 2-8 GPUs, a sample of the bench's MoE requests, whose ep groups cross
nodes), its expert all-to-all term equals the kinds' own at etp = 1 (so a floor raised by any
factor fails here), and the sameness it reads the dispatch bytes by: each layer's
ep_dispatch_bytes is the same at every ep > 1 and etp of a (mbs, tp, sp, cp) point."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from planner.cost import resolve_costs
from planner.cost.folded import ep_time
from planner.errors import SpecError
from planner.search.kinds import (
    coarse_key,
    coarse_work,
    expert_work,
    kind_key,
    kind_layer_costs,
    kind_links,
    kind_work,
)
from planner.search.space import Config, enumerate_configs
from planner.specs import PlanRequest

from .random_folded import random_folded_request

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _kinds(request: PlanRequest, limit: int | None) -> list[Config]:
    src = resolve_costs(request)
    kinds: dict[object, Config] = {}
    for cfg in enumerate_configs(request, num_layers=len(src.layers)):
        if cfg.ep > 1:
            kinds.setdefault(kind_key(cfg), cfg)
    sample = list(kinds.values())
    if limit is not None:
        random.Random(2).shuffle(sample)
        sample = sample[:limit]
    return sample


def _check(request: PlanRequest, limit: int | None = None) -> tuple[int, int]:
    """expert_work <= kind_work of every sampled kind, with its all-to-all term equal to the
    kind's own at etp = 1; returns (kinds compared, of them with a positive term)."""
    src = resolve_costs(request)
    compared = positive = 0
    for cfg in _kinds(request, limit):
        try:
            w, c = kind_work(request, src, cfg)
        except (SpecError, ValueError):
            continue
        we, ce = expert_work(request, src, cfg)
        wc, cc = coarse_work(request, src, coarse_key(cfg))
        assert wc <= we <= w and cc <= ce <= c, (cfg, wc, we, w, cc, ce, c)
        # the kind's own expert communication, both directions, every layer (etp = 1: the
        # all-to-alls alone), against what the floor added to the coarse terms
        _, folded = kind_links(request, src, cfg)
        assert folded is not None
        own = sum(2.0 * ep_time(cost, folded) for cost in kind_layer_costs(src, cfg))
        if cfg.etp == 1:
            assert math.isclose(ce - cc, own, rel_tol=1e-9, abs_tol=1e-12), (cfg, ce - cc, own)
            assert math.isclose(we - wc, own, rel_tol=1e-9, abs_tol=1e-12), (cfg, we - wc, own)
        compared += 1
        positive += own > 0
    return compared, positive


def test_expert_work_is_at_most_every_kind_under_it() -> None:
    compared = positive = 0
    for i in range(10):
        request = random_folded_request(random.Random(f"expert-moe-{i}"), "moe")
        a, b = _check(request)
        compared, positive = compared + a, positive + b
    assert compared >= 100 and positive >= 50


@pytest.mark.parametrize(
    "name",
    ["moe-deepseek-v3-2048xh100", "moe-mixtral-8x7b-64xh100", "moe-qwen3-235b-a22b-256xh100"],
)
def test_expert_work_is_at_most_the_bench_kinds(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    compared, positive = _check(request, 120)
    assert compared >= 100 and positive >= 100


@pytest.mark.parametrize("name", ["moe-mixtral-8x7b-64xh100", "moe-qwen3-235b-a22b-256xh100"])
def test_dispatch_bytes_are_the_same_at_every_ep_and_etp(name: str) -> None:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    src = resolve_costs(request)
    seen: dict[object, tuple[float, ...]] = {}
    points: set[object] = set()
    for cfg in _kinds(request, None):
        point = (coarse_key(cfg), cfg.ep, cfg.etp)
        if point in points:
            continue
        points.add(point)
        sent = tuple(c.ep_dispatch_bytes for c in kind_layer_costs(src, cfg))
        assert seen.setdefault(coarse_key(cfg), sent) == sent, cfg
    assert len(points) > len(seen) >= 10
