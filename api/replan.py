"""Replan: run a stored plan's request again under today's cost model (and calibration), and
say what changed (POST /v1/plans/{id}/replan, `meshplan plan --replan ID`; issue #17 §4).

The stored request is the normalised one (profile inline, calibration constants filled in).
Under `calibration_id` it is planned with that stored calibration instead (the closed loop: a
calibration fitted on the plan's own runs); `calibration_id: null` plans with the catalog
defaults. The plan cache only answers with plans made under today's cost-model version
(api.store.plans.find_cached), so a plan stored under another version is searched again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.planning import Outcome, Planner
from api.present import current_result, plan_document, plan_model
from api.problems import ProblemError
from api.schemas.plans import PlanCreate
from api.state import AppState
from api.store import plans as plan_store
from api.store.keys import Principal
from api.store.plans import StoredPlan
from planner.specs.request import CalibrationRef

KEEP = object()
"""`calibration_id` not given: keep the stored request's calibration."""


class ReplanBody(BaseModel):
    """Optional: plan under another stored calibration (`null`: the catalog defaults; absent:
    the stored request's own)."""

    model_config = ConfigDict(extra="forbid")

    calibration_id: str | None = Field(default=None, min_length=1, max_length=200)


def calibration_choice(body: ReplanBody | None) -> Any:
    """KEEP, None (the defaults) or a stored calibration's id."""
    if body is None or "calibration_id" not in body.model_fields_set:
        return KEEP
    return body.calibration_id


CONFIG_FIELDS = (
    "tp",
    "pp",
    "dp",
    "vpp",
    "schedule",
    "micro_batch_size",
    "num_microbatches",
    "zero_stage",
    "sequence_parallel",
    "recompute",
    "recompute_blocks",
)
PREDICTION_FIELDS = (
    "step_time_s",
    "tokens_per_s",
    "bubble_fraction",
    "peak_memory_bytes",
    "mfu",
)


def stored_request(row: StoredPlan, calibration_id: Any = KEEP) -> PlanCreate:
    """The plan's stored request as today's PlanRequest (422 when today's schema refuses it),
    with `calibration_id` (when given) in place of its calibration."""
    doc = dict(row.request)
    if calibration_id is not KEEP:
        doc["calibration"] = None
    try:
        request = PlanCreate.model_validate(doc)  # the stored document carries its tags
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProblemError(
            422,
            "Stored request no longer valid",
            f"plan {row.id}'s stored request is refused by today's schema at {where}: "
            f"{first['msg']}",
            kind="validation",
            errors=[{"field": f"stored.request.{where}", "message": first["msg"]}],
        ) from None
    if isinstance(calibration_id, str):
        request = request.model_copy(update={"calibration": CalibrationRef(id=calibration_id)})
    return request


def _change(old: Any, new: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"old": old, "new": new}
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, new))
    if numbers:
        out["change"] = new - old
        out["relative_change"] = (new / old - 1) if old else None
    else:
        out["changed"] = old != new
    return out


def plan_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Configuration and prediction of two plans (JSON, any schema version): per field old,
    new and the change; `changed` lists the configuration fields that differ. A field an old
    plan did not store is null there."""
    old_pred, new_pred = old.get("prediction") or {}, new.get("prediction") or {}
    config = {f: _change(old.get(f), new.get(f)) for f in CONFIG_FIELDS}
    prediction = {f: _change(old_pred.get(f), new_pred.get(f)) for f in PREDICTION_FIELDS}
    return {
        "configuration": config,
        "prediction": prediction,
        "changed": [f for f in CONFIG_FIELDS if old.get(f) != new.get(f)],
    }


async def replan(
    state: AppState, principal: Principal, plan_id: str, calibration_id: Any = KEEP
) -> tuple[Outcome, dict[str, Any]]:
    """(the new plan's outcome, the response document: old and new plan and their diff)."""
    from starlette.concurrency import run_in_threadpool

    def load() -> StoredPlan | None:
        with state.sessions() as session:
            return plan_store.get_plan(session, tenant=principal.tenant, plan_id=plan_id)

    old = await run_in_threadpool(load)
    if old is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    request = stored_request(old, calibration_id)
    outcome = await Planner(state).submit(principal, request, wait=True)
    assert outcome.plan is not None  # wait=True
    new = outcome.plan
    old_plan = current_result(old.result)["plan"]
    new_plan = current_result(new.result)["plan"]
    doc = {
        "old": {"id": old.id, "created_at": old.created_at.isoformat(), **plan_model(old)},
        "new": plan_document(new, cache_hit=not outcome.created),
        "diff": plan_diff(old_plan, new_plan),
    }
    return outcome, doc
