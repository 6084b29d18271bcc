"""The sweep's group order (driver._sweep_order): objective time by the estimate coarse floor
x (1 + (pp - 1) / m), groups without costs last; objective bubble by the 1F1B bubble share,
pp = 1 first (what _zero_bubble_to_prove relies on). The order decides only what the sweep
sees first; what it prunes is the floors' work (tests/planner/search/test_vs_exhaustive.py)."""

from __future__ import annotations

import math
from pathlib import Path

from planner.cost import resolve_costs
from planner.search.driver import Outcome, _coarse_floor, _sweep_order, sweep_groups
from planner.search.space import Config, enumerate_configs
from planner.specs import PlanRequest

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _groups(request: PlanRequest) -> list[list[Config]]:
    src = resolve_costs(request)
    return sweep_groups(enumerate_configs(request, num_layers=len(src.layers)))


def _request(name: str, **changes: object) -> PlanRequest:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    return request.model_copy(update=changes)


def test_time_order_is_by_estimated_step_time() -> None:
    request = _request("llama2-13b-128xa100-cap40")
    src = resolve_costs(request)
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
    groups = _groups(request)
    ordered = _sweep_order(request, src, out, groups)
    assert sorted(map(id, ordered)) == sorted(map(id, groups))  # a permutation
    estimates = []
    for ms in ordered:
        floor = _coarse_floor(request, src, out, ms, known=True)
        c = ms[0]
        estimates.append(
            math.inf if floor is None else floor * (1 + (c.pp - 1) / c.num_microbatches)
        )
    assert estimates == sorted(estimates)
    assert len(set(estimates)) > 1
    # not the bubble share's order (pp = 1 first, whatever its work)
    shares = [(ms[0].pp - 1) / (ms[0].num_microbatches + ms[0].pp - 1) for ms in ordered]
    assert shares != sorted(shares)


def test_bubble_order_puts_pp_1_first() -> None:
    request = _request("gpt3-2.7b-32xh100-bubble")
    assert request.objective == "bubble"
    src = resolve_costs(request)
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
    ordered = _sweep_order(request, src, out, _groups(request))
    shares = [(ms[0].pp - 1) / (ms[0].num_microbatches + ms[0].pp - 1) for ms in ordered]
    assert shares == sorted(shares)
    pps = [ms[0].pp for ms in ordered]
    assert pps[0] == 1 and any(p > 1 for p in pps)
    assert not out.coarse_kinds  # no cost model called for this order
