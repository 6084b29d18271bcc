"""/v1/calibrations: fit the cost model's constants to observations or stored runs, and keep
the documents (planner.calibrate; docs/cost-model.md §5). A plan or evaluation request names
one with `"calibration": {"id": ...}`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.calibrations import observations_from_runs, run_ids_of, summary
from api.deps import PrincipalDep, SessionDep
from api.limits import MAX_SCHEDULE_ACTIONS, check_candidate_size, check_request
from api.present import decode_newest_first_token, newest_first_token
from api.problems import ProblemError
from api.schemas.problem import problem_responses
from api.store import calibrations as store
from planner.calibrate import Calibration, NotDetermined, Observation, calibrate
from planner.catalog.efficiency import CONSTANT_NAMES
from planner.cost import check_candidate
from planner.errors import SpecError

router = APIRouter(prefix="/v1", tags=["calibrations"])

MAX_OBSERVATIONS = 50
DEFAULT_FIT = ["matmul_fraction", "link_fraction"]


class CalibrationCreate(BaseModel):
    """Observations inline, or stored runs (each with the plan it ran): by run id, every run
    of some plans, or the runs some submissions' jobs reported (any of the three together)."""

    model_config = ConfigDict(extra="forbid")

    observations: list[Observation] | None = Field(default=None, max_length=MAX_OBSERVATIONS)
    run_ids: list[str] | None = Field(default=None, max_length=MAX_OBSERVATIONS)
    plan_ids: list[str] | None = Field(default=None, max_length=MAX_OBSERVATIONS)
    submission_ids: list[str] | None = Field(default=None, max_length=MAX_OBSERVATIONS)
    fit: list[str] = Field(default_factory=lambda: list(DEFAULT_FIT), min_length=1, max_length=4)
    scope: dict[str, str] = Field(default_factory=dict, max_length=20)
    hold_undetermined: bool = Field(
        default=False,
        description="keep a constant the observations cannot determine at its default (named "
        "with the reason in `held`) instead of refusing",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CalibrationCreate:
        stored = (self.run_ids, self.plan_ids, self.submission_ids)
        if (self.observations is None) == all(x is None for x in stored):
            raise ValueError(
                "give either 'observations' or stored runs ('run_ids', 'plan_ids', "
                "'submission_ids')"
            )
        bad = [n for n in self.fit if n not in CONSTANT_NAMES]
        if bad:
            raise ValueError(f"fit: unknown constants {bad}; known: {list(CONSTANT_NAMES)}")
        return self


def _invalid(field: str, message: str, value: Any = None) -> ProblemError:
    return ProblemError(
        422,
        "Invalid calibration",
        f"{field}: {message}",
        kind="validation",
        errors=[{"field": field, "message": message, "value": value}],
    )


def _check(observations: list[Observation]) -> None:
    """The service's size limits and each candidate checked against its request."""
    actions = 0
    for i, o in enumerate(observations):
        prefix = f"observations[{i}]."
        check_request(o.request, prefix=prefix + "request.")
        check_candidate_size(o.request, o.candidate, prefix=prefix)
        try:
            c = check_candidate(o.request, o.candidate, fill_stages=False)
        except SpecError as exc:
            raise _invalid(f"body.{prefix}{exc.field}", str(exc), exc.value) from exc
        actions += c.num_microbatches(o.request.training.global_batch_size) * c.pp * c.vpp
    if actions > MAX_SCHEDULE_ACTIONS:
        raise _invalid(
            "body.observations",
            f"{actions} simulated actions in all exceed the service limit {MAX_SCHEDULE_ACTIONS}",
        )


@router.post(
    "/calibrations",
    status_code=201,
    response_model=None,
    responses={201: {"model": Calibration}, **problem_responses(422)},
    summary="Fit the cost model's constants to measured runs",
)
def create_calibration(
    body: CalibrationCreate, principal: PrincipalDep, session: SessionDep
) -> JSONResponse:
    if body.observations is not None:
        observations = body.observations
    else:
        run_ids = list(body.run_ids or [])
        if body.plan_ids or body.submission_ids:
            more = run_ids_of(
                session,
                tenant=principal.tenant,
                plan_ids=body.plan_ids or [],
                submission_ids=body.submission_ids or [],
            )
            run_ids = list(dict.fromkeys([*run_ids, *more]))
            if len(run_ids) > MAX_OBSERVATIONS:
                raise _invalid(
                    "body.plan_ids",
                    f"{len(run_ids)} stored runs exceed the limit of {MAX_OBSERVATIONS} "
                    "observations; name runs by run_ids",
                )
        observations = observations_from_runs(session, tenant=principal.tenant, run_ids=run_ids)
    if not observations:
        raise _invalid("body.observations", "no observations to calibrate on", [])
    _check(observations)
    try:
        cal = calibrate(
            observations,
            names=body.fit,
            scope=body.scope,
            hold_undetermined=body.hold_undetermined,
        )
    except NotDetermined as exc:
        raise _invalid("body.fit", f"not determined: {exc}", body.fit) from exc
    except ValueError as exc:
        raise _invalid("body.observations", str(exc)[:2000]) from exc
    doc = cal.model_dump(mode="json")
    row, created = store.upsert_calibration(
        session, tenant=principal.tenant, calibration_id=cal.id, gpu=cal.gpu, body=doc
    )
    return JSONResponse(
        {**doc, "created_at": row.created_at.isoformat()},
        status_code=201 if created else 200,
        headers={"Location": f"/v1/calibrations/{cal.id}"},
    )


@router.get(
    "/calibrations/{calibration_id}",
    response_model=None,
    responses={200: {"model": Calibration}, **problem_responses(404)},
    summary="One stored calibration",
)
def read_calibration(
    calibration_id: str, principal: PrincipalDep, session: SessionDep
) -> JSONResponse:
    row = store.get_calibration(session, tenant=principal.tenant, calibration_id=calibration_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no calibration {calibration_id!r}")
    return JSONResponse({**row.body, "created_at": row.created_at.isoformat()})


@router.get(
    "/calibrations",
    response_model=None,
    responses=problem_responses(422),
    summary="Stored calibrations, newest first (without their observations)",
)
def list_calibrations(
    principal: PrincipalDep,
    session: SessionDep,
    page_size: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=1000)] = None,
) -> JSONResponse:
    after = decode_newest_first_token(page_token) if page_token else None
    rows, more = store.list_calibrations(
        session, tenant=principal.tenant, page_size=page_size, after=after
    )
    token = newest_first_token(rows[-1].created_at, rows[-1].id) if more and rows else None
    data = [summary(r.body, r.created_at.isoformat()) for r in rows]
    return JSONResponse({"data": data, "next_page_token": token})
