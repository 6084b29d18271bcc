"""space.enumerate_groups builds the sweep's groups during the enumeration: the same groups,
in the same order, with the same members in the same order, as cases.sweep_grouped makes of
enumerate_configs' list (which groups them with a dictionary over every configuration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cost import resolve_costs
from planner.search.space import enumerate_configs, enumerate_groups
from planner.specs import PlanRequest

from .cases import sweep_grouped
from .helpers import framework_request as request

CASES = Path(__file__).resolve().parents[3] / "bench" / "cases"


def _bench(name: str) -> PlanRequest:
    return PlanRequest.model_validate_json((CASES / f"{name}.json").read_text())


REQUESTS = {
    "free": request(None),
    "megatron": request("megatron"),
    "torchtitan": request("torchtitan"),
    "deepspeed": request("deepspeed"),
    "uniform": request(None, uniform_recompute=True),
    "moe": _bench("moe-qwen3-30b-a3b-8xh100"),
    "moe-torchtitan": _bench("moe-qwen3-30b-a3b-16xh100-torchtitan"),
    "cp-torchtitan": _bench("cp-llama3.1-8b-32k-8xh100-torchtitan"),
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_groups_are_sweep_groups_of_the_configurations(name: str) -> None:
    req = REQUESTS[name]
    n = len(resolve_costs(req).layers)
    groups = enumerate_groups(req, num_layers=n)
    assert groups == sweep_grouped(enumerate_configs(req, num_layers=n))
    assert all(groups)


def test_a_group_whose_leading_members_are_dropped_comes_at_its_first_kept_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No framework's check drops a block's first (schedule, vpp) from some groups and not
    # others (the case the order is for), so a check that does: 1f1b under ZeRO-0.
    req = request("megatron")
    n = len(resolve_costs(req).layers)
    monkeypatch.setattr(
        "planner.search.space.framework_checker",
        lambda _: lambda c: ["dropped"] if c.zero_stage == 0 and c.schedule == "1f1b" else [],
    )
    groups = enumerate_groups(req, num_layers=n)
    assert groups == sweep_grouped(enumerate_configs(req, num_layers=n))
    # the check changed the order: a block's ZeRO-0 groups (1f1b dropped) come after its
    # ZeRO-1 ones (product order: ZeRO-0 first)
    z0 = next(i for i, g in enumerate(groups) if g[0].zero_stage == 0 and g[0].pp > 1)
    assert groups[z0 - 1][0].zero_stage == 1
