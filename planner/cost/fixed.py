"""A Plan for a fixed candidate: the cost model's prediction, no search (what-if, tests)."""

from __future__ import annotations

from planner.cost.candidate import check_candidate
from planner.cost.evaluate import evaluate
from planner.cost.source import CostSource, resolve_costs
from planner.plan import Plan
from planner.specs.request import Candidate, PlanRequest

FIXED_WHY = ("fixed candidate, evaluated by the cost model (no search)",)


def fixed_plan(
    request: PlanRequest, candidate: Candidate, *, source: CostSource | None = None
) -> Plan:
    """Fill the candidate's stages (balanced when absent), predict it, and wrap it as a Plan."""
    src = source if source is not None else resolve_costs(request)
    checked = check_candidate(request, candidate, source=src)
    prediction = evaluate(request, checked, source=src)
    return Plan.build(request, checked, prediction, why=FIXED_WHY)
