"""A database outage under load, against a PostgreSQL cluster the test starts itself
(pg_cluster.private_cluster) and a live uvicorn server on it.

While the database is down every request that needs it answers 503 problem+json with
Retry-After (never a 500, never a dropped connection), /readyz says 503 and /healthz 200. Once
it is back the service recovers without a restart, no search is left `running`, a request that
failed during the outage succeeds on resend within its search's time limit (no stale claim to
wait out), and every acknowledged plan and job is there with exactly one result.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from pg_cluster import PgCluster, pg_bin, private_cluster
from sqlalchemy.exc import IntegrityError, OperationalError
from svc_factories import tiny_request
from svc_harness import ADMIN_KEY, Live, make_settings, serve

from api.app import create_app
from api.outage import OutagePolicy, is_outage, retry_while_down
from api.problems import problem_of
from api.state import app_state

OUTAGE_S = 3.0
TIME_LIMIT_S = 5.0  # each request's search time limit
RESEND_SLACK_S = 3.0  # HTTP, cache miss and the store on a loaded 2-core machine
CLIENTS = 4
PROBLEM_JSON = "application/problem+json"


@dataclass
class Seen:
    """What one load client saw, by phase ('before', 'down', 'restarting', 'after'; 'edge'
    when a request was sent in one phase and answered in another)."""

    statuses: list[tuple[str, str, int]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # a 503 without problem+json/Retry-After
    transport: list[str] = field(default_factory=list)  # dropped/refused connections
    acked_plans: set[str] = field(default_factory=set)
    acked_jobs: set[str] = field(default_factory=set)
    acked_runs: set[str] = field(default_factory=set)
    failed: list[dict[str, Any]] = field(default_factory=list)  # POSTs answered 503


@dataclass
class Outage:
    cluster: PgCluster
    live: Live
    db_url: str
    key: dict[str, str]
    phase: list[str]


@pytest.fixture
def outage() -> Iterator[Outage]:
    yield from _service(solver_workers=3)


@pytest.fixture
def outage_queue() -> Iterator[Outage]:
    """Searches as procrastinate tasks, run by a worker inside the API process."""
    yield from _service(search_queue="procrastinate", with_worker=True, worker_concurrency=2)


def _service(**settings_kw: object) -> Iterator[Outage]:
    with private_cluster() as cluster:
        db_url = cluster.create_database("meshplan")
        settings = make_settings(db_url, max_time_limit_s=TIME_LIMIT_S, **settings_kw)
        with serve(create_app(settings)) as live:
            r = httpx.post(
                f"{live.url}/v1/keys",
                json={"tenant": "acme"},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            )
            assert r.status_code == 201, r.text
            key = {"Authorization": f"Bearer {r.json()['key']}"}
            yield Outage(cluster, live, db_url, key, ["before"])


def _body(client_no: int, i: int) -> dict[str, Any]:
    """A distinct request per (client, i): a new search each time (the tag is in the hash)."""
    return tiny_request(
        search={"time_limit_s": TIME_LIMIT_S, "top_k": 1}, tags=[f"c{client_no}-{i}"]
    )


def _run_body(seed: dict[str, Any], note: str) -> dict[str, Any]:
    """A measured run of the seed plan (shapes from its prediction), told apart by its note."""
    plan = seed["result"]["plan"]
    return {
        "device": "cpu",
        "backend": "gloo",
        "world_size": plan["tp"] * plan["pp"] * plan["dp"],
        "tp": plan["tp"],
        "pp": plan["pp"],
        "dp": plan["dp"],
        "schedule": plan["schedule"],
        "steps": 2,
        "warmup_steps": 1,
        "step_times_s": [0.5, 0.5],
        "step_time_s": 0.5,
        "bubble_fraction": 0.25,
        "stages": [
            {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.1, "peak_memory_bytes": 1e9}
            for s in plan["prediction"]["stages"]
        ],
        "notes": {"id": note},
    }


def _calls(client_no: int, i: int, seed: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Even clients post new plans (client 0 async: it never waits on a search, so it posts
    throughout the outage; every other post with an Idempotency-Key); odd ones read a plan,
    the history and a timeline (a request-scoped session), and report a run of the plan (a
    write through a request-scoped session)."""
    plan_url = f"/v1/plans/{seed['id']}"
    if client_no % 2:
        return [
            ("GET", plan_url, {}),
            ("GET", "/v1/plans", {"params": {"page_size": 5, "tag": "seed"}}),
            ("GET", f"{plan_url}/timeline.svg", {}),
            ("POST", f"{plan_url}/runs", {"json": _run_body(seed, f"{client_no}-{i}")}),
        ]
    headers = {"Prefer": "respond-async"} if client_no % 4 == 0 else {}
    if i % 2:
        headers["Idempotency-Key"] = f"k-{client_no}-{i}"
    return [("POST", "/v1/plans", {"json": _body(client_no, i), "headers": headers})]


def _load(
    o: Outage, client_no: int, seed: dict[str, Any], stop: threading.Event, seen: Seen
) -> None:
    with httpx.Client(base_url=o.live.url, headers=o.key, timeout=60) as client:
        i = 0
        while not stop.is_set():
            i += 1
            for method, path, kw in _calls(client_no, i, seed):
                phase = o.phase[0]
                try:
                    r = client.request(method, path, **kw)
                except httpx.TransportError as exc:
                    seen.transport.append(f"{phase} {method} {path}: {exc!r}")
                    continue
                if o.phase[0] != phase:  # sent in one phase, answered in another
                    phase = "edge"
                seen.statuses.append((phase, f"{method} {path.split('/')[-1][:12]}", r.status_code))
                if r.status_code == 503 and (
                    not r.headers.get("content-type", "").startswith(PROBLEM_JSON)
                    or not r.headers.get("retry-after")
                ):
                    seen.broken.append(f"{method} {path}: {r.headers} {r.text[:200]}")
                if path.endswith("/runs"):
                    if r.status_code == 201:
                        seen.acked_runs.add(r.json()["id"])
                elif method == "POST":
                    if r.status_code in (200, 201):
                        seen.acked_plans.add(r.json()["id"])
                    elif r.status_code == 202:
                        seen.acked_jobs.add(r.json()["id"])
                    elif r.status_code == 503:
                        seen.failed.append(kw)
            time.sleep(0.02)


def _without_prefer(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "Prefer"}


def _wait_job(client: httpx.Client, job_id: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] != "running" or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def _slow_body(tag: str) -> dict[str, Any]:
    """A search of a few seconds (48 layers on 64 GPUs under a 12 GiB cap: about 4 s on an idle
    core; without the cap the search proves it in 0.4 s), long enough to be running when the
    database stops and to finish while it is down."""
    return tiny_request(
        model={
            "family": "gpt",
            "name": "slow-gpt",
            "num_layers": 48,
            "hidden_size": 4096,
            "num_attention_heads": 16,
            "vocab_size": 32000,
        },
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
        training={"global_batch_size": 256, "seq_length": 2048},
        constraints={"memory_cap_gib": 12},
        search={"time_limit_s": TIME_LIMIT_S, "top_k": 1},
        tags=[tag],
    )


def _slow_searches_done(o: Outage) -> float:
    """Searches that returned a plan after more than a second (the slow ones, not the load's)."""
    registry = app_state(o.live.app).metrics.registry
    name = "meshplan_search_duration_seconds"
    count = registry.get_sample_value(f"{name}_count", {"outcome": "ok"}) or 0.0
    fast = registry.get_sample_value(f"{name}_bucket", {"outcome": "ok", "le": "1.0"}) or 0.0
    return count - fast


@dataclass
class Slow:
    """Two slow searches in flight across the outage: one the client waits for, one async."""

    sync_body: dict[str, Any]
    async_body: dict[str, Any]
    async_job: str
    sync_answer: list[httpx.Response] = field(default_factory=list)
    thread: threading.Thread | None = None


def _start_slow(o: Outage, client: httpx.Client) -> Slow:
    slow = Slow(_slow_body("slow-sync"), _slow_body("slow-async"), "")
    r = client.post("/v1/plans", json=slow.async_body, headers={"Prefer": "respond-async"})
    assert r.status_code == 202, r.text
    slow.async_job = r.json()["id"]

    def wait_sync() -> None:
        with httpx.Client(base_url=o.live.url, headers=o.key, timeout=120) as own:
            slow.sync_answer.append(own.post("/v1/plans", json=slow.sync_body))

    slow.thread = threading.Thread(target=wait_sync, daemon=True)
    slow.thread.start()
    state = app_state(o.live.app)
    deadline = time.monotonic() + 10
    while state.pool.running < 2:  # both searches past their claim and cache check
        assert time.monotonic() < deadline, "the slow searches did not start"
        time.sleep(0.05)
    return slow


def _outage(o: Outage, client: httpx.Client) -> tuple[list[int], list[tuple[Any, ...]]]:
    """Stop the database for at least OUTAGE_S and until both slow searches have returned
    (their plans wait to be stored); probe /healthz and /readyz meanwhile."""
    done_before = _slow_searches_done(o)
    o.cluster.stop()
    o.phase[0] = "down"
    t0 = time.monotonic()
    health: list[int] = []
    ready: list[tuple[Any, ...]] = []
    while time.monotonic() < t0 + OUTAGE_S or _slow_searches_done(o) < done_before + 2:
        assert time.monotonic() < t0 + 60, "the slow searches did not finish in 60 s"
        health.append(client.get("/healthz").status_code)
        r = client.get("/readyz")
        ready.append((r.status_code, r.headers.get("content-type"), r.headers.get("retry-after")))
        time.sleep(0.3)
    o.phase[0] = "restarting"  # answers during the start may come from either side
    o.cluster.start()
    o.phase[0] = "after"
    return health, ready


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.skipif(pg_bin("initdb") is None, reason="PostgreSQL server binaries not found")
def test_database_outage_under_load(outage: Outage) -> None:
    o = outage
    with httpx.Client(base_url=o.live.url, headers=o.key, timeout=60) as client:
        seed = client.post("/v1/plans", json=tiny_request(tags=["seed"]))
        assert seed.status_code == 201, seed.text
        seed_doc = seed.json()
        slow = _start_slow(o, client)

        stop = threading.Event()
        seen = [Seen() for _ in range(CLIENTS)]
        threads = [
            threading.Thread(target=_load, args=(o, n, seed_doc, stop, seen[n]), daemon=True)
            for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(0.5)
        health, ready = _outage(o, client)

        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "not ready 10 s after the database came back"
            time.sleep(0.1)
        time.sleep(1.5)
        stop.set()
        assert slow.thread is not None
        for t in [*threads, slow.thread]:
            t.join(timeout=TIME_LIMIT_S + 30)
            assert not t.is_alive()

        # --- while it was down ---------------------------------------------------------
        assert set(health) == {200}, health
        assert {s for s, _, _ in ready} == {503}, ready
        assert all(ct and ct.startswith(PROBLEM_JSON) and ra for _, ct, ra in ready), ready
        statuses = [s for one in seen for s in one.statuses]
        assert [s for s in statuses if s[2] >= 500 and s[2] != 503] == []
        assert [b for one in seen for b in one.broken] == []
        assert [e for one in seen for e in one.transport] == []
        down = [s for s in statuses if s[0] == "down"]
        assert [s for s in down if s[1].startswith("GET")], "no GET while the database was down"
        assert [s for s in down if s[1].startswith("GET") and s[2] != 503] == []
        after = [s for s in statuses if s[0] == "after"]
        assert after and any(s[2] in (200, 201, 202) for s in after), after
        # the pool dropped the connections the shutdown killed: no request after it fails
        assert Counter(s[2] for s in after)[503] == 0, after

        # --- the searches that spanned the outage: stored once it was back ------------
        (sync_answer,) = slow.sync_answer
        assert sync_answer.status_code == 201, sync_answer.text
        job = _wait_job(client, slow.async_job, TIME_LIMIT_S + RESEND_SLACK_S)
        assert job["status"] == "succeeded", job

        # --- resend what failed: as fast as a fresh request, no stale claim to wait out --
        failed = [kw for one in seen for kw in one.failed]
        assert failed, "no POST failed during the outage: it did not overlap the load"
        sync = [{"json": kw["json"], "headers": _without_prefer(kw["headers"])} for kw in failed]
        keyed = [kw for kw in sync if "Idempotency-Key" in kw["headers"]]
        unkeyed = [kw for kw in sync if "Idempotency-Key" not in kw["headers"]]
        assert keyed and unkeyed, (len(keyed), len(unkeyed))
        slow_again = [{"json": slow.sync_body}, {"json": slow.async_body}]
        for kw in [*keyed[:4], *unkeyed[:4], *slow_again]:  # the same key: not stuck in flight
            t0 = time.monotonic()
            r = client.post("/v1/plans", **kw)
            took = time.monotonic() - t0
            assert r.status_code in (200, 201), r.text
            assert took < TIME_LIMIT_S + RESEND_SLACK_S, f"resend took {took:.1f} s"

        # --- nothing acknowledged lost -------------------------------------------------
        plans = {p for one in seen for p in one.acked_plans} | {sync_answer.json()["id"]}
        jobs = {j for one in seen for j in one.acked_jobs}
        for plan_id in plans:
            assert client.get(f"/v1/plans/{plan_id}").status_code == 200, plan_id
        for job_id in jobs:
            job = _wait_job(client, job_id, TIME_LIMIT_S + RESEND_SLACK_S)
            assert job["status"] != "running", job
            if job["status"] == "succeeded":
                assert client.get(f"/v1/plans/{job['plan_id']}").status_code == 200
        runs = {r for one in seen for r in one.acked_runs}
        listed = client.get(f"/v1/plans/{seed_doc['id']}/runs").json()["data"]
        notes = [r["report"]["notes"]["id"] for r in listed]
        assert runs and runs <= {r["id"] for r in listed}
        assert len(notes) == len(set(notes))  # no report stored twice
    _assert_settled(o.db_url)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.skipif(pg_bin("initdb") is None, reason="PostgreSQL server binaries not found")
def test_database_outage_with_the_queue_worker(outage_queue: Outage) -> None:
    """The same load and outage with searches on the PostgreSQL queue: no 500, 503s with
    Retry-After, recovery, resends that succeed, nothing acknowledged lost."""
    o = outage_queue
    assert app_state(o.live.app).queue is not None and app_state(o.live.app).worker is not None
    with httpx.Client(base_url=o.live.url, headers=o.key, timeout=60) as client:
        seed = client.post("/v1/plans", json=tiny_request(tags=["seed"]))
        assert seed.status_code == 201, seed.text
        stop = threading.Event()
        seen = [Seen() for _ in range(CLIENTS)]
        threads = [
            threading.Thread(target=_load, args=(o, n, seed.json(), stop, seen[n]), daemon=True)
            for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        time.sleep(1.0)
        o.cluster.stop()
        o.phase[0] = "down"
        time.sleep(OUTAGE_S)
        o.phase[0] = "restarting"
        o.cluster.start()
        o.phase[0] = "after"
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join(timeout=TIME_LIMIT_S + 60)
            assert not t.is_alive()
        statuses = [s for one in seen for s in one.statuses]
        assert [s for s in statuses if s[2] >= 500 and s[2] != 503] == []
        assert [b for one in seen for b in one.broken] == []
        assert [e for one in seen for e in one.transport] == []
        down = [s for s in statuses if s[0] == "down" and s[1].startswith("GET")]
        assert down and [s for s in down if s[2] != 503] == []
        failed = [kw for one in seen for kw in one.failed]
        assert failed, "no POST failed during the outage"
        for kw in failed[:4]:
            t0 = time.monotonic()
            r = client.post("/v1/plans", json=kw["json"], headers=_without_prefer(kw["headers"]))
            assert r.status_code in (200, 201), r.text
            assert time.monotonic() - t0 < TIME_LIMIT_S + RESEND_SLACK_S
        for one in seen:
            for plan_id in one.acked_plans:
                assert client.get(f"/v1/plans/{plan_id}").status_code == 200
            for job_id in one.acked_jobs:
                job = _wait_job(client, job_id, TIME_LIMIT_S + 30)
                assert job["status"] != "running", job
    _assert_settled(o.db_url)


def _assert_settled(db_url: str) -> None:
    """No job left running or holding its request's key; one plan per distinct request."""
    deadline = time.monotonic() + TIME_LIMIT_S + RESEND_SLACK_S
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        while True:
            running = conn.execute("SELECT id FROM jobs WHERE status = 'running'").fetchall()
            if not running or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert running == []
        held = conn.execute("SELECT id FROM jobs WHERE inflight_key IS NOT NULL").fetchall()
        assert held == []
        twice = conn.execute(
            "SELECT request_hash, count(*) FROM plans GROUP BY request_hash HAVING count(*) > 1"
        ).fetchall()
        assert twice == []


def _refused() -> OperationalError:
    """What SQLAlchemy raises for a refused connection (the DBAPI error it wraps included)."""
    return OperationalError("connect", {}, psycopg.OperationalError("Connection refused"))


def test_retry_while_down_retries_outages_only() -> None:
    policy = OutagePolicy(write_within_s=5.0, first_backoff_s=0.01, max_backoff_s=0.02)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _refused()
        return "stored"

    assert retry_while_down(flaky, policy=policy) == "stored" and len(calls) == 3

    def broken() -> None:
        calls.append(1)
        raise ValueError("not an outage")

    calls.clear()
    with pytest.raises(ValueError):
        retry_while_down(broken, policy=policy)
    assert len(calls) == 1


def test_retry_while_down_gives_up_after_its_window() -> None:
    policy = OutagePolicy(write_within_s=0.2, first_backoff_s=0.05, max_backoff_s=0.05)

    def down() -> None:
        raise _refused()

    t0 = time.monotonic()
    with pytest.raises(OperationalError):
        retry_while_down(down, policy=policy)
    assert time.monotonic() - t0 < 1.0


def test_outages_are_503_with_retry_after_and_other_db_errors_are_not() -> None:
    problem = problem_of(_refused())
    assert problem is not None and problem.status == 503
    assert problem.headers == {"Retry-After": str(OutagePolicy().retry_after_s)}
    duplicate = IntegrityError("insert", {}, psycopg.errors.UniqueViolation("duplicate key"))
    assert not is_outage(duplicate) and problem_of(duplicate) is None
