"""/v1/plans/{id}/launch: launch configs for a stored plan (JSON, or a tar.gz of the files).

Deployment fields come as query parameters on GET (repeat `hosts`/`entry_args`; `env` as
`env=KEY=VALUE`) or as a JSON body on POST."""

from __future__ import annotations

import io
import tarfile
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.deps import PrincipalDep, SessionDep
from api.launch_fit import fit_cluster, stored_gpus_per_node
from api.problems import ProblemError, field_errors, unsupported_plan
from api.schemas.problem import problem_responses
from api.store import plans as plan_store
from planner.errors import SpecError, UnsupportedPlanError
from planner.launch import Deployment, LaunchBundle, Target, render
from planner.plan import PlanResult
from planner.specs.base import Framework

router = APIRouter(prefix="/v1", tags=["launch"])

TargetQ = Annotated[Target, Query()]
FrameworkQ = Annotated[Framework, Query()]
FormatQ = Annotated[Literal["json", "tar.gz"] | None, Query()]
_RESERVED = {"target", "framework", "format", "key"}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "files, per-node commands and notes (or a tar.gz of the files)",
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    },
    **problem_responses(404, 422),
}


def _deployment_from_query(request: Request) -> Deployment:
    doc: dict[str, Any] = {}
    multi = {"hosts", "entry_args"}
    for name in request.query_params:
        if name in _RESERVED:
            continue
        values = request.query_params.getlist(name)
        if name in multi:
            doc[name] = values
        elif name == "env":
            doc["env"] = {v.partition("=")[0]: v.partition("=")[2] for v in values}
        else:
            doc[name] = values[-1]
    try:
        return Deployment.model_validate(doc)
    except ValidationError as exc:
        errors = field_errors([{**e, "loc": ("query", *e["loc"])} for e in exc.errors()])
        raise ProblemError(
            422,
            "Invalid deployment",
            "; ".join(f"{e['field']}: {e['message']}" for e in errors)[:2000],
            kind="validation",
            errors=errors,
        ) from exc


def _bundle(
    session: Session,
    tenant: str,
    plan_id: str,
    deployment: Deployment,
    target: Target,
    framework: Framework,
) -> LaunchBundle:
    row = plan_store.get_plan(session, tenant=tenant, plan_id=plan_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no plan {plan_id!r}")
    plan = PlanResult.model_validate(row.result).plan
    deployment = fit_cluster(plan, deployment, gpus_per_node=stored_gpus_per_node(row.request))
    try:
        return render(plan, deployment, target=target, framework=framework)
    except UnsupportedPlanError as exc:  # short: one line per kind of reason (api.refusal)
        raise unsupported_plan(exc, pp=plan.pp) from exc
    except SpecError:
        raise  # mapped to a 422 problem naming the field
    except ValueError as exc:  # e.g. a derived value the emitter's own models reject
        raise ProblemError(
            422, "Cannot render launch configs", str(exc)[:2000], kind="validation"
        ) from exc


def _respond(
    request: Request, bundle: LaunchBundle, fmt: str | None, plan_id: str
) -> LaunchBundle | Response:
    wants_tar = fmt == "tar.gz" or (
        fmt is None and "application/gzip" in request.headers.get("accept", "")
    )
    if not wants_tar:
        return bundle
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in bundle.files:
            data = f.content.encode()
            info = tarfile.TarInfo(name=f"meshplan-{plan_id}/{f.name}")
            info.size, info.mode, info.mtime = len(data), f.mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return Response(
        buf.getvalue(),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="meshplan-{plan_id}.tar.gz"'},
    )


@router.get(
    "/plans/{plan_id}/launch",
    response_model=LaunchBundle,
    responses=_RESPONSES,
    summary="Launch configs for a plan (deployment fields as query parameters)",
)
def launch_get(
    plan_id: str,
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    target: TargetQ = "torchrun",
    framework: FrameworkQ = "meshplan",
    format: FormatQ = None,
) -> LaunchBundle | Response:
    deployment = _deployment_from_query(request)
    bundle = _bundle(session, principal.tenant, plan_id, deployment, target, framework)
    return _respond(request, bundle, format, plan_id)


@router.post(
    "/plans/{plan_id}/launch",
    response_model=LaunchBundle,
    responses=_RESPONSES,
    summary="Launch configs for a plan (deployment as the JSON body)",
)
def launch_post(
    plan_id: str,
    body: Deployment,
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    target: TargetQ = "torchrun",
    framework: FrameworkQ = "meshplan",
    format: FormatQ = None,
) -> LaunchBundle | Response:
    bundle = _bundle(session, principal.tenant, plan_id, body, target, framework)
    return _respond(request, bundle, format, plan_id)
