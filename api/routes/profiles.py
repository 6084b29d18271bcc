"""/v1/profiles: stored model profiles (the profiler uploads here)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from api.deps import PrincipalDep, SessionDep
from api.present import decode_newest_first_token, newest_first_token
from api.problems import ProblemError
from api.schemas.problem import problem_responses
from api.schemas.profiles import ProfileListPublic, ProfilePublic
from api.store import profiles as store
from api.store.tables import ProfileRow
from planner.specs import ModelProfile

router = APIRouter(prefix="/v1", tags=["profiles"])


def _summary(row: ProfileRow) -> dict[str, object]:
    return {
        "id": row.id,
        "created_at": row.created_at.isoformat(),
        "name": row.name,
        "model_hash": row.model_hash,
        "source": row.source,
    }


@router.post(
    "/profiles",
    status_code=201,
    response_model=None,
    responses={201: {"model": ProfilePublic}, **problem_responses(422)},
    summary="Store a model profile",
)
def create_profile(
    body: ModelProfile, principal: PrincipalDep, session: SessionDep
) -> JSONResponse:
    doc = body.model_dump(mode="json")
    row = store.insert_profile(
        session,
        tenant=principal.tenant,
        name=body.name,
        model_hash=body.model_hash,
        source=body.source,
        body=doc,
    )
    return JSONResponse(
        {**_summary(row), "profile": doc},
        status_code=201,
        headers={"Location": f"/v1/profiles/{row.id}"},
    )


@router.get(
    "/profiles/{profile_id}",
    response_model=None,
    responses={200: {"model": ProfilePublic}, **problem_responses(404)},
    summary="One stored profile",
)
def read_profile(profile_id: str, principal: PrincipalDep, session: SessionDep) -> JSONResponse:
    row = store.get_profile(session, tenant=principal.tenant, profile_id=profile_id)
    if row is None:
        raise ProblemError(404, "Not found", f"no profile {profile_id!r}")
    return JSONResponse({**_summary(row), "profile": row.body})


@router.get(
    "/profiles",
    response_model=None,
    responses={200: {"model": ProfileListPublic}, **problem_responses(422)},
    summary="Stored profiles, newest first",
)
def list_profiles(
    principal: PrincipalDep,
    session: SessionDep,
    page_size: Annotated[int, Query(ge=1, le=200)] = 50,
    page_token: Annotated[str | None, Query(max_length=1000)] = None,
) -> JSONResponse:
    after = decode_newest_first_token(page_token) if page_token else None
    rows, more = store.list_profiles(
        session, tenant=principal.tenant, page_size=page_size, after=after
    )
    token = newest_first_token(rows[-1].created_at, rows[-1].id) if more and rows else None
    return JSONResponse({"data": [_summary(r) for r in rows], "next_page_token": token})
