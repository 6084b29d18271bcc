"""`tags` and `force` are the service's fields (api.schemas.plans.PlanCreate), not the core
request's: the JSON API takes them as before, `meshplan plan`'s PlanRequest refuses them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from svc_factories import tiny_request
from svc_harness import Api

from api.schemas.plans import PlanCreate
from planner.specs import PlanRequest


def test_core_request_refuses_service_fields() -> None:
    for extra in ({"tags": ["t"]}, {"force": True}):
        with pytest.raises(ValidationError) as info:
            PlanRequest.model_validate(tiny_request(**extra))
        assert info.value.errors()[0]["loc"] == tuple(extra)
    create = PlanCreate.model_validate(tiny_request(tags=["t"], force=True))
    core = create.core()
    assert type(core) is PlanRequest and "tags" not in core.model_dump()
    assert core == PlanRequest.model_validate(tiny_request())


def test_service_takes_tags_and_force(api: Api) -> None:
    body = tiny_request(tags=["team-a"])
    first = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert first.status_code == 201, first.text
    assert first.json()["tags"] == ["team-a"] and "force" not in first.json()["request"]
    again = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    forced = api.client.post("/v1/plans", json={**body, "force": True}, headers=api.acme)
    assert forced.status_code == 201 and forced.json()["id"] != first.json()["id"]
    other = api.client.post("/v1/plans", json=tiny_request(tags=["team-b"]), headers=api.acme)
    assert other.status_code == 201  # the tags are part of what was asked
    listed = api.client.get("/v1/plans", params={"tag": "team-a"}, headers=api.acme).json()
    assert {p["id"] for p in listed["data"]} == {first.json()["id"], forced.json()["id"]}
