"""The sweep's group order (sweep_floors.sweep_order): objective time by the estimate coarse floor
x (1 + the least bubble share of the group's schedules: (pp - 1) / m for gpipe and 1F1B, half
that for interleaved and zbv, a third for zb-h1), groups without costs last; objective bubble
by the 1F1B bubble share, pp = 1 first (what _zero_bubble_to_prove relies on). The order
decides only what the sweep sees first; what it prunes is the floors' work
(tests/planner/search/test_vs_exhaustive.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.megatron_table1 import DEFAULT_CASES, load_cases
from bench.search_speed import request_for
from planner.cost import resolve_costs
from planner.search.outcome import Outcome
from planner.search.space import Config, enumerate_groups
from planner.search.sweep_floors import coarse_floor, sweep_order
from planner.specs import PlanRequest

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _groups(request: PlanRequest) -> list[list[Config]]:
    src = resolve_costs(request)
    return enumerate_groups(request, num_layers=len(src.layers))


def _request(name: str, **changes: object) -> PlanRequest:
    request = PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())
    return request.model_copy(update=changes)


def _documented_share(c: Config) -> float:
    """The bubble share the module docstring states (from the papers, not from the driver's
    code): (pp - 1) / m, half that for interleaved and zbv, a third for zb-h1."""
    share = (c.pp - 1) / c.num_microbatches
    return {"interleaved-1f1b": share / 2, "zbv": share / 2, "zb-h1": share / 3}.get(
        c.schedule, share
    )


def test_time_order_is_by_estimated_step_time() -> None:
    request = _request("llama2-13b-128xa100-cap40")
    src = resolve_costs(request)
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
    groups = _groups(request)
    ordered = sweep_order(request, src, out, groups)
    assert sorted(map(id, ordered)) == sorted(map(id, groups))  # a permutation
    estimates = []
    for ms in ordered:
        floor = coarse_floor(request, src, out, ms, known=True)
        bubble = min(_documented_share(c) for c in ms)
        estimates.append(math.inf if floor is None else floor * (1 + bubble))
    assert estimates == sorted(estimates)
    assert len(set(estimates)) > 1
    # not the bubble share's order (pp = 1 first, whatever its work)
    shares = [(ms[0].pp - 1) / (ms[0].num_microbatches + ms[0].pp - 1) for ms in ordered]
    assert shares != sorted(shares)


def test_time_order_ranks_a_zbv_group_by_its_smaller_bubble() -> None:
    """310.1B: tp = 4 pp = 12 dp = 40 (its winner is zbv) comes before tp = 8 pp = 6 dp = 40,
    whose work floor is lower but whose 1F1B bubble would rank it first."""
    if not Path(DEFAULT_CASES).exists():
        pytest.skip("../shared/cases is not here")
    case = next(c for c in load_cases(DEFAULT_CASES) if c["name"] == "megatron-gpt-310.1b")
    request = request_for(case, 30)
    src = resolve_costs(request)
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
    ordered = sweep_order(request, src, out, _groups(request))

    def at(tp: int, pp: int) -> int:
        return next(
            i
            for i, ms in enumerate(ordered)
            if (ms[0].tp, ms[0].pp, ms[0].micro_batch_size, ms[0].zero_stage) == (tp, pp, 1, 1)
        )

    assert at(4, 12) < at(8, 6)


def test_bubble_order_puts_pp_1_first() -> None:
    request = _request("gpt3-2.7b-32xh100-bubble")
    assert request.objective == "bubble"
    src = resolve_costs(request)
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src)
    ordered = sweep_order(request, src, out, _groups(request))
    shares = [(ms[0].pp - 1) / (ms[0].num_microbatches + ms[0].pp - 1) for ms in ordered]
    assert shares == sorted(shares)
    pps = [ms[0].pp for ms in ordered]
    assert pps[0] == 1 and any(p > 1 for p in pps)
    assert not out.coarse_kinds  # no cost model called for this order
