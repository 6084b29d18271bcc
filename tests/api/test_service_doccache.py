"""The encoded-document cache behind GET /v1/plans/{id} and a cached POST /v1/plans
(api.doccache), on SQLite and PostgreSQL: a hit is the bytes a miss answers, authorisation
comes first, the cache is bounded, and what can change (a plan's submissions, which plan
answers a request) is read afresh, also when another process changed it."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from svc_factories import evaluated_result, tiny_request
from svc_harness import Api, make_settings

from api.app import create_app
from api.doccache import DocumentCache
from api.state import AppState
from api.store.db import session_scope
from api.store.plans import insert_plan
from api.store.tables import SubmissionRow


def _plan(api: Api, tenant: str = "acme", name: str = "tiny-gpt") -> str:
    request = tiny_request()
    request["model"]["name"] = name
    result = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    with session_scope(_state(api).sessions) as session:
        row = insert_plan(
            session,
            tenant=tenant,
            request_hash=name[:64].ljust(64, "h"),
            request=request,
            result=result,
            tags=["x"],
        )
        return row.id


def _state(api: Api) -> AppState:
    state = api.app.state.meshplan
    assert isinstance(state, AppState)
    return state


def _cache(api: Api) -> DocumentCache:
    return _state(api).documents


@contextmanager
def _other_process(db_url: str, **settings: Any) -> Iterator[TestClient]:
    """A second app on the same database: what another API process sees and writes."""
    app = create_app(make_settings(db_url, migrate_on_start=False, **settings))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_a_hit_is_the_bytes_of_a_miss(api: Api, db_url: str) -> None:
    plan_id = _plan(api)
    url = f"/v1/plans/{plan_id}"
    miss = api.client.get(url, headers=api.acme)
    assert miss.status_code == 200 and _cache(api).stats().entries == 1
    hit = api.client.get(url, headers=api.acme)
    assert _cache(api).stats().hits == 1
    assert hit.status_code == 200 and hit.content == miss.content
    assert hit.headers["content-type"] == miss.headers["content-type"] == "application/json"
    zipped = api.client.get(url, headers={**api.acme, "Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and "accept-encoding" in (
        zipped.headers["vary"].lower()
    )
    assert zipped.content == miss.content  # the client decoded it
    # a process without the cache answers the same bytes
    with _other_process(db_url, document_cache_entries=0) as other:
        fresh = other.get(url, headers=api.acme)
        assert fresh.status_code == 200 and fresh.content == miss.content
        unzipped = other.get(url, headers={**api.acme, "Accept-Encoding": "gzip"})
        assert unzipped.headers["content-encoding"] == "gzip"
        assert unzipped.content == miss.content


def test_a_key_without_read_rights_is_refused_when_cached(api: Api) -> None:
    plan_id = _plan(api)
    url = f"/v1/plans/{plan_id}"
    assert api.client.get(url, headers=api.acme).status_code == 200
    assert api.client.get(url, headers=api.acme).status_code == 200  # cached now
    other = api.client.get(url, headers=api.globex)
    assert other.status_code == 404 and plan_id in other.json()["detail"]
    assert api.client.get(
        url, headers={"Authorization": "Bearer nope-" + "x" * 20}
    ).status_code == (401)
    assert api.client.get(url).status_code == 401


def test_a_cached_post_is_the_bytes_of_a_miss_and_per_tenant(api: Api) -> None:
    body = tiny_request()
    first = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert first.status_code == 201, first.text
    miss = api.client.post("/v1/plans", json=body, headers=api.acme)
    hit = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert miss.status_code == hit.status_code == 200
    assert hit.content == miss.content and miss.json()["cache_hit"] is True
    assert hit.headers["location"] == f"/v1/plans/{first.json()['id']}"
    assert _cache(api).get("acme", first.json()["id"], "hit") is not None
    # another tenant's identical request is its own plan, not acme's cached one
    theirs = api.client.post("/v1/plans", json=body, headers=api.globex)
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]


def test_a_submission_made_elsewhere_is_seen_by_a_cached_get(api: Api) -> None:
    plan_id = _plan(api)
    url = f"/v1/plans/{plan_id}"
    assert api.client.get(url, headers=api.acme).json()["submissions"] == []
    assert api.client.get(url, headers=api.acme).json()["submissions"] == []  # a hit
    # another process submits the plan: a row in the database, no message to this process
    with session_scope(_state(api).sessions) as session:
        session.add(
            SubmissionRow(
                id="sub-elsewhere",
                tenant="acme",
                plan_id=plan_id,
                backend="slurm",
                framework="meshplan",
                state="PENDING",
                deployment={},
            )
        )
    doc = api.client.get(url, headers=api.acme).json()
    assert [s["id"] for s in doc["submissions"]] == ["sub-elsewhere"]
    assert api.client.get(url, headers=api.globex).status_code == 404


def test_a_newer_plan_stored_elsewhere_is_the_next_cached_answer(api: Api, db_url: str) -> None:
    body = tiny_request()
    old = api.client.post("/v1/plans", json=body, headers=api.acme).json()["id"]
    assert api.client.post("/v1/plans", json=body, headers=api.acme).json()["id"] == old
    with _other_process(db_url) as other:
        forced = other.post("/v1/plans", json={**body, "force": True}, headers=api.acme)
        assert forced.status_code == 201, forced.text
    new = forced.json()["id"]
    assert new != old
    again = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert again.status_code == 200 and again.json()["id"] == new
    assert again.headers["location"] == f"/v1/plans/{new}"


def test_the_cache_is_bounded_and_answers_right_after_evicting(db_url: str) -> None:
    app = create_app(make_settings(db_url, document_cache_entries=2))
    with TestClient(app, raise_server_exceptions=False) as client:
        from svc_harness import new_key

        api = Api(app, client, new_key(client, "acme"), new_key(client, "globex"), {})
        ids = [_plan(api, name=f"tiny-gpt-{i}") for i in range(3)]
        first = {i: client.get(f"/v1/plans/{i}", headers=api.acme).content for i in ids}
        stats = _cache(api).stats()
        assert (stats.entries, stats.evictions) == (2, 1)
        for i in ids:  # the evicted one is read again, the others come from the cache
            assert client.get(f"/v1/plans/{i}", headers=api.acme).content == first[i]
        assert _cache(api).stats().entries == 2


def test_gzip_of_a_miss_decodes_to_the_document(api: Api) -> None:
    plan_id = _plan(api)
    r = api.client.get(f"/v1/plans/{plan_id}", headers={**api.acme, "Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert r.json()["id"] == plan_id
    entry = _cache(api).get("acme", plan_id, "get")
    assert entry is not None and entry.gzipped is not None
    assert gzip.decompress(entry.gzipped) == entry.body == r.content
