"""/v1/keys: admin keys create API keys for any tenant."""

from __future__ import annotations

from fastapi import APIRouter

from api.auth import require_admin
from api.deps import PrincipalDep, SessionDep
from api.schemas.keys import KeyCreate, KeyCreated
from api.schemas.problem import problem_responses
from api.store.keys import create_key

router = APIRouter(prefix="/v1", tags=["keys"])


@router.post(
    "/keys",
    status_code=201,
    response_model=KeyCreated,
    responses=problem_responses(403, 422),
    summary="Create an API key (admin only)",
)
def create(body: KeyCreate, principal: PrincipalDep, session: SessionDep) -> KeyCreated:
    require_admin(principal)
    row, key = create_key(session, tenant=body.tenant, admin=body.admin, name=body.name)
    return KeyCreated(
        id=row.id,
        tenant=row.tenant,
        admin=row.admin,
        name=row.name,
        created_at=row.created_at,
        key=key,
    )
