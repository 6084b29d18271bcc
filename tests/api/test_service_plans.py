"""POST /v1/plans: cache hits, force, idempotency (replay, 422, 409), single-flight within a
process and across processes, respond-async jobs, infeasible requests, profile ids."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from svc_factories import profile_doc, tiny_request
from svc_harness import ADMIN_KEY, Api, make_settings

from api.app import create_app
from api.lifecycle import start, stop
from api.routes.plans import body_fingerprint
from api.schemas.plans import PlanCreate
from api.store import idempotency
from api.store.plans import count_plans


def searches(api_or_text: Any) -> float:
    text = api_or_text if isinstance(api_or_text, str) else api_or_text.client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("meshplan_searches_total "):
            return float(line.split()[1])
    raise AssertionError("meshplan_searches_total not exported")


def test_create_then_cache_hit_then_force(api: Api) -> None:
    body = tiny_request()
    r1 = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert r1.status_code == 201, r1.text
    plan = r1.json()
    assert r1.headers["location"] == f"/v1/plans/{plan['id']}"
    assert plan["cache_hit"] is False and plan["result"]["plan"]["num_gpus"] == 4
    assert searches(api) == 1
    # the same request, spelled with explicit defaults, is the same normalised request
    r2 = api.client.post(
        "/v1/plans", json={**body, "objective": "time", "tags": []}, headers=api.acme
    )
    assert r2.status_code == 200 and r2.json()["cache_hit"] is True
    assert r2.json()["id"] == plan["id"]
    assert searches(api) == 1
    r3 = api.client.post("/v1/plans", json={**body, "force": True}, headers=api.acme)
    assert r3.status_code == 201 and r3.json()["id"] != plan["id"]
    assert searches(api) == 2
    # another tenant never gets acme's cached plan
    r4 = api.client.post("/v1/plans", json=body, headers=api.globex)
    assert r4.status_code == 201 and r4.json()["id"] not in (plan["id"], r3.json()["id"])
    assert api.client.get(f"/v1/plans/{plan['id']}", headers=api.globex).status_code == 404


def test_idempotency_key(api: Api) -> None:
    body = tiny_request(tags=["idem"])
    h = {**api.acme, "Idempotency-Key": "k-1"}
    first = api.client.post("/v1/plans", json=body, headers=h)
    assert first.status_code == 201
    n = searches(api)
    again = api.client.post("/v1/plans", json=body, headers=h)
    assert again.status_code == 201  # replayed as it was, not re-evaluated as a cache hit
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert searches(api) == n
    other = api.client.post("/v1/plans", json=tiny_request(tags=["other"]), headers=h)
    assert other.status_code == 422
    assert other.json()["type"].endswith("idempotency-mismatch")
    # the same key of another tenant is another key
    assert (
        api.client.post(
            "/v1/plans",
            json=tiny_request(tags=["x"]),
            headers={**api.globex, "Idempotency-Key": "k-1"},
        ).status_code
        == 201
    )


def test_idempotency_key_in_flight_is_409(api: Api) -> None:
    body = tiny_request(tags=["busy"])

    fp = body_fingerprint(PlanCreate.model_validate(body))
    claim = idempotency.begin(
        api.app.state.meshplan.sessions, tenant="acme", key="k-busy", fingerprint=fp
    )
    assert claim.outcome == "new"  # as if a request with this key were running now
    r = api.client.post("/v1/plans", json=body, headers={**api.acme, "Idempotency-Key": "k-busy"})
    assert r.status_code == 409 and r.headers["content-type"].startswith("application/problem+json")


async def _burst(
    app: Any, headers: dict[str, str], body: dict[str, Any], n: int
) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
        return list(
            await asyncio.gather(
                *(c.post("/v1/plans", json=body, headers=headers) for _ in range(n))
            )
        )


def test_single_flight_in_process(db_url: str) -> None:
    app = create_app(make_settings(db_url))
    state = app.state.meshplan
    start(state)
    try:
        h = {"Authorization": f"Bearer {ADMIN_KEY}"}
        rs = asyncio.run(_burst(app, h, tiny_request(tags=["burst"]), 8))
        codes = sorted(r.status_code for r in rs)
        assert codes == [200] * 7 + [201], [r.text[:300] for r in rs]
        assert len({r.json()["id"] for r in rs}) == 1
        assert state.metrics.searches._value.get() == 1
        with state.sessions() as s:
            assert count_plans(s, tenant="default") == 1
    finally:
        stop(state)


def test_single_flight_across_processes(db_url: str) -> None:
    """Two app instances (as two worker processes would be) on one database."""
    apps = [create_app(make_settings(db_url)) for _ in range(2)]
    for a in apps:
        start(a.state.meshplan)
    try:
        h = {"Authorization": f"Bearer {ADMIN_KEY}"}
        body = tiny_request(tags=["two-procs"])

        async def both() -> list[httpx.Response]:
            results = await asyncio.gather(*(_burst(a, h, body, 3) for a in apps))
            return [r for rs in results for r in rs]

        rs = asyncio.run(both())
        assert all(r.status_code in (200, 201) for r in rs), [r.text[:300] for r in rs]
        assert len({r.json()["id"] for r in rs}) == 1
        total = sum(a.state.meshplan.metrics.searches._value.get() for a in apps)
        assert total == 1
        with apps[0].state.meshplan.sessions() as s:
            assert count_plans(s, tenant="default") == 1
    finally:
        for a in apps:
            stop(a.state.meshplan)


def test_respond_async_job(api: Api) -> None:
    r = api.client.post(
        "/v1/plans",
        json=tiny_request(tags=["async"]),
        headers={**api.acme, "Prefer": "respond-async"},
    )
    assert r.status_code == 202, r.text
    job_url = r.headers["location"]
    assert job_url == f"/v1/jobs/{r.json()['id']}"
    deadline = time.monotonic() + 60
    while True:
        job = api.client.get(job_url, headers=api.acme).json()
        if job["status"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert job["status"] == "succeeded" and job["progress"] == 1.0, job
    plan = api.client.get(job["plan_url"], headers=api.acme)
    assert plan.status_code == 200 and plan.json()["id"] == job["plan_id"]
    assert api.client.get(job_url, headers=api.globex).status_code == 404


def test_infeasible_is_422_with_diagnosis(api: Api) -> None:
    body = tiny_request(
        model={
            "family": "gpt",
            "name": "too-big",
            "num_layers": 96,
            "hidden_size": 12288,
            "num_attention_heads": 96,
            "vocab_size": 51200,
        },
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 1},
        training={"global_batch_size": 8, "seq_length": 2048},
    )
    r = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert r.status_code == 422, r.text
    doc = r.json()
    assert doc["type"].endswith("/infeasible") and doc["diagnosis"]
    assert r.headers["content-type"].startswith("application/problem+json")


def test_infeasible_for_a_frameworks_stage_split_names_the_split(api: Api) -> None:
    # DeepSpeed splits decoder layers equally: 30 of them do not divide over pp = 4 stages,
    # whatever the memory (the cap is far above any peak)
    body = tiny_request(
        model={**tiny_request()["model"], "num_layers": 30},
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
        constraints={"memory_cap_gib": 80, "pp": [4], "framework": "deepspeed"},
    )
    r = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert r.status_code == 422, r.text
    d = r.json()["diagnosis"]
    assert d["binding"] == "stage_split" and d["decoder_layers"] == 30 and d["stage_counts"] == [4]
    assert "30 decoder layers" in r.json()["detail"]


def test_plan_by_profile_id(api: Api) -> None:
    req = tiny_request()
    pid = api.client.post("/v1/profiles", json=profile_doc(req), headers=api.acme).json()["id"]
    r = api.client.post("/v1/plans", json={**req, "model": {"profile_id": pid}}, headers=api.acme)
    assert r.status_code == 201, r.text
    assert "profile" in r.json()["request"]["model"]  # resolved and stored inline
    r = api.client.post("/v1/plans", json={**req, "model": {"profile_id": pid}}, headers=api.globex)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.model.profile_id"


@pytest.mark.parametrize("n", [3])
def test_history_lists_created_plans(api: Api, n: int) -> None:
    ids = []
    for i in range(n):
        ids.append(
            api.client.post(
                "/v1/plans", json=tiny_request(tags=[f"h{i}", "hist"]), headers=api.acme
            ).json()["id"]
        )
    got = api.client.get("/v1/plans", params={"tag": "hist"}, headers=api.acme).json()["data"]
    assert [p["id"] for p in got] == ids[::-1]
    got = api.client.get("/v1/plans", params={"tag": "h1"}, headers=api.acme).json()["data"]
    assert [p["id"] for p in got] == [ids[1]]


def test_client_going_away_does_not_cancel_the_search(db_url: str) -> None:
    """One solver worker: B runs, A waits in the queue; A's client disconnects. A's search must
    still run and land (and an identical request later gets its plan), not be cancelled and
    leave its job holding the in-flight key."""
    app = create_app(make_settings(db_url, solver_workers=1))
    state = app.state.meshplan
    start(state)
    h = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body_a, body_b = tiny_request(tags=["a"]), tiny_request(tags=["b"])

    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
            b = asyncio.create_task(c.post("/v1/plans", json=body_b, headers=h))
            await asyncio.sleep(0.05)
            a = asyncio.create_task(c.post("/v1/plans", json=body_a, headers=h))
            await asyncio.sleep(0.05)
            a.cancel()  # the client goes away
            await b
            return await asyncio.wait_for(c.post("/v1/plans", json=body_a, headers=h), 30)

    try:
        again = asyncio.run(scenario())
        assert again.status_code in (200, 201), again.text
        assert state.metrics.searches._value.get() == 2  # A's search ran once, B's once
    finally:
        stop(state)


def test_time_limit_is_capped_by_the_settings(tmp_path: Any) -> None:
    app = create_app(make_settings(f"sqlite:///{tmp_path / 'cap.db'}", max_time_limit_s=1.5))
    state = app.state.meshplan
    start(state)
    try:
        h = {"Authorization": f"Bearer {ADMIN_KEY}"}
        body = tiny_request(search={"time_limit_s": 600, "top_k": 1})

        async def one() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
                return await c.post("/v1/plans", json=body, headers=h)

        r = asyncio.run(one())
        assert r.status_code == 201, r.text
        assert r.json()["result"]["search"]["time_limit_s"] == 1.5
        assert r.json()["request"]["search"]["time_limit_s"] == 600  # the request as asked
    finally:
        stop(state)


def test_searches_are_bounded_by_the_pool(db_url: str) -> None:
    app = create_app(make_settings(db_url, solver_workers=1))
    state = app.state.meshplan
    start(state)
    try:
        h = {"Authorization": f"Bearer {ADMIN_KEY}"}

        async def three() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
                return list(
                    await asyncio.gather(
                        *(
                            c.post("/v1/plans", json=tiny_request(tags=[f"pool-{i}"]), headers=h)
                            for i in range(3)
                        )
                    )
                )

        rs = asyncio.run(three())
        assert [r.status_code for r in rs] == [201, 201, 201]
        assert state.metrics.searches._value.get() == 3
        assert state.pool.peak_running == 1
    finally:
        stop(state)


def test_a_stale_in_flight_key_is_taken_over(api: Api) -> None:
    """A reservation left by a process that died does not block its key forever."""
    from datetime import timedelta

    from sqlalchemy import update

    from api.store.tables import IdempotencyRow, utcnow

    body = tiny_request(tags=["stale"])
    sessions = api.app.state.meshplan.sessions
    claim = idempotency.begin(
        sessions,
        tenant="acme",
        key="k-dead",
        fingerprint=body_fingerprint(PlanCreate.model_validate(body)),
    )
    assert claim.outcome == "new"
    h = {**api.acme, "Idempotency-Key": "k-dead"}
    assert api.client.post("/v1/plans", json=body, headers=h).status_code == 409
    with sessions() as s:
        s.execute(
            update(IdempotencyRow)
            .where(IdempotencyRow.key == "k-dead")
            .values(created_at=utcnow() - timedelta(hours=2))
        )
        s.commit()
    assert api.client.post("/v1/plans", json=body, headers=h).status_code == 201
