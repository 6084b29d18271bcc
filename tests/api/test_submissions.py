"""The submission resource on SQLite and PostgreSQL, with the scheduler stand-in at the
Submitter seam: documents, tenancy, the allow-list, idempotency, outages, pages, the poller,
cancel, and the report token."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from submit_double import SchedulerDouble
from svc_factories import cpu_request
from svc_harness import ADMIN_KEY, make_settings, new_key

from api.app import create_app
from api.state import AppState
from api.submit import JobStatus

WORKDIR = "/srv/jobs"


@dataclass
class Sub:
    client: TestClient
    state: AppState
    scheduler: SchedulerDouble
    kube: SchedulerDouble
    acme: dict[str, str]
    globex: dict[str, str]
    plan_id: str

    def submit(self, body: dict[str, Any] | None = None, **kw: Any) -> Any:
        doc = body or {"backend": "slurm", "deployment": {"workdir": WORKDIR}}
        headers = {**self.acme, **kw.pop("headers", {})}
        plan_id = kw.pop("plan_id", self.plan_id)
        return self.client.post(f"/v1/plans/{plan_id}/submissions", json=doc, headers=headers, **kw)


@pytest.fixture
def sub(db_url: str) -> Iterator[Sub]:
    settings = make_settings(
        db_url,
        submission_tenants={
            "acme": {"backends": ["slurm", "kubernetes"]},
            "globex": {"backends": ["slurm"], "partitions": ["debug"]},
        },
        submission_poll_interval_s=3600.0,  # the tests poll by hand
        submission_poll_max_backoff_s=3600.0,
        submission_token_grace_s=0.0,
    )
    scheduler, kube = SchedulerDouble(), SchedulerDouble(backend="kubernetes")
    app = create_app(settings, submitters={"slurm": scheduler, "kubernetes": kube})
    with TestClient(app, raise_server_exceptions=False) as client:
        acme = new_key(client, "acme")
        r = client.post("/v1/plans", json=cpu_request(), headers=acme)
        assert r.status_code == 201, r.text
        yield Sub(
            client=client,
            state=app.state.meshplan,
            scheduler=scheduler,
            kube=kube,
            acme=acme,
            globex=new_key(client, "globex"),
            plan_id=r.json()["id"],
        )


def _count(sub: Sub, headers: dict[str, str] | None = None) -> int:
    r = sub.client.get("/v1/submissions", headers=headers or sub.acme)
    assert r.status_code == 200, r.text
    return len(r.json()["data"])


def test_post_answers_the_document_and_get_and_plan_show_it(sub: Sub) -> None:
    r = sub.submit()
    assert r.status_code == 201, r.text
    doc = r.json()
    assert r.headers["location"] == f"/v1/submissions/{doc['id']}"
    assert (doc["plan_id"], doc["backend"], doc["framework"]) == (sub.plan_id, "slurm", "meshplan")
    assert doc["state"] == "PENDING" and doc["scheduler_job_id"] == "100"
    assert doc["run_ids"] == [] and doc["exit_code"] is None and doc["submitted_at"]
    spec = sub.scheduler.specs["100"]
    assert spec.workdir == WORKDIR and spec.nodes == 1
    assert spec.name.endswith(doc["id"][:8])
    assert f"cd {WORKDIR}/meshplan-{doc['id']}" in spec.script
    assert "--report-url" not in spec.script  # report defaults to false
    got = sub.client.get(doc["links"]["self"], headers=sub.acme)
    assert got.status_code == 200 and got.json() == doc
    plan = sub.client.get(f"/v1/plans/{sub.plan_id}", headers=sub.acme).json()
    assert [s["id"] for s in plan["submissions"]] == [doc["id"]]


def test_a_tenant_sees_and_cancels_only_its_own(sub: Sub) -> None:
    sid = sub.submit().json()["id"]
    assert sub.client.get(f"/v1/submissions/{sid}", headers=sub.globex).status_code == 404
    r = sub.client.delete(f"/v1/submissions/{sid}", headers=sub.globex)
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem")
    assert sub.scheduler.cancelled == []
    assert _count(sub, sub.globex) == 0 and _count(sub) == 1
    # another tenant's plan is not there to submit either
    body = {"backend": "slurm", "deployment": {"workdir": WORKDIR, "partition": "debug"}}
    assert sub.submit(body, headers=sub.globex).status_code == 404


@pytest.mark.parametrize(
    ("who", "body", "field"),
    [
        ("globex", {"backend": "kubernetes"}, "backend"),
        (
            "globex",
            {"backend": "slurm", "deployment": {"workdir": WORKDIR}},
            "deployment.partition",
        ),
        (
            "globex",
            {"backend": "slurm", "deployment": {"workdir": WORKDIR, "partition": "gpu"}},
            "deployment.partition",
        ),
    ],
)
def test_outside_the_allow_list_is_403_and_reaches_no_scheduler(
    sub: Sub, who: str, body: dict[str, Any], field: str
) -> None:
    headers = sub.acme if who == "acme" else sub.globex
    plan_id = sub.plan_id
    if who == "globex":  # globex's own plan
        r = sub.client.post("/v1/plans", json=cpu_request(), headers=headers)
        plan_id = r.json()["id"]
    r = sub.client.post(f"/v1/plans/{plan_id}/submissions", json=body, headers=headers)
    assert r.status_code == 403, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == field
    assert sub.scheduler.specs == sub.kube.specs == {} and _count(sub, headers) == 0


def test_an_allowed_partition_goes_through(sub: Sub) -> None:
    r = sub.client.post("/v1/plans", json=cpu_request(), headers=sub.globex)
    body = {"backend": "slurm", "deployment": {"workdir": WORKDIR, "partition": "debug"}}
    r = sub.client.post(f"/v1/plans/{r.json()['id']}/submissions", json=body, headers=sub.globex)
    assert r.status_code == 201, r.text
    assert r.json()["partition"] == "debug" and sub.scheduler.specs["100"].partition == "debug"


def test_bad_requests_name_the_field(sub: Sub) -> None:
    r = sub.submit({"backend": "slurm", "deployment": {"workdir": "relative/dir"}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "deployment.workdir"
    body = {"backend": "slurm", "framework": "megatron", "report": True}
    r = sub.submit({**body, "deployment": {"workdir": WORKDIR}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "body.report"
    r = sub.submit({"backend": "pbs"})
    assert r.status_code == 422 and "backend" in r.json()["errors"][0]["field"]
    r = sub.submit(plan_id="nope")
    assert r.status_code == 404
    sub.scheduler.reject = "sbatch: error: invalid partition specified: gpu"
    r = sub.submit()
    assert r.status_code == 422 and "invalid partition" in r.json()["detail"]
    assert sub.scheduler.specs == {} and _count(sub) == 0


def test_scheduler_down_is_503_with_retry_after_and_records_nothing(sub: Sub) -> None:
    sub.scheduler.down = True
    key = {"Idempotency-Key": "down-1"}
    r = sub.submit(headers=key)
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "7"
    assert r.headers["content-type"].startswith("application/problem+json")
    assert _count(sub) == 0
    sub.scheduler.down = False  # the same key works once the scheduler is back
    r = sub.submit(headers=key)
    assert r.status_code == 201 and len(sub.scheduler.specs) == 1


def test_a_retried_post_never_submits_twice(sub: Sub) -> None:
    key = {"Idempotency-Key": "job-7"}
    first = sub.submit(headers=key)
    again = sub.submit(headers=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert again.headers["location"] == first.headers["location"]
    assert len(sub.scheduler.specs) == 1 and _count(sub) == 1
    other = sub.submit({"backend": "slurm", "deployment": {"workdir": "/elsewhere"}}, headers=key)
    assert other.status_code == 422 and "Idempotency-Key" in other.json()["title"]
    assert len(sub.scheduler.specs) == 1


def test_list_filters_and_cursor_pages(sub: Sub) -> None:
    ids = [sub.submit().json()["id"] for _ in range(5)]
    sub.scheduler.states["101"] = JobStatus(state="RUNNING")
    sub.scheduler.states["102"] = JobStatus(state="FAILED", exit_code=3)
    sub.state.poller.poll_once()
    seen: list[str] = []
    token = None
    for _ in range(10):
        params: dict[str, Any] = {"page_size": 2, **({"page_token": token} if token else {})}
        body = sub.client.get("/v1/submissions", params=params, headers=sub.acme).json()
        seen += [d["id"] for d in body["data"]]
        token = body["next_page_token"]
        if token is None:
            break
    assert seen == ids[::-1]  # newest first, each once

    def ids_for(**params: Any) -> list[str]:
        r = sub.client.get("/v1/submissions", params=params, headers=sub.acme)
        assert r.status_code == 200, r.text
        return [d["id"] for d in r.json()["data"]]

    assert ids_for(state="RUNNING") == [ids[1]]
    assert ids_for(state="FAILED") == [ids[2]]
    assert ids_for(plan_id=sub.plan_id, backend="slurm") == ids[::-1]
    assert ids_for(backend="kubernetes") == []
    assert ids_for(plan_id="other") == []
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert ids_for(created_after=future) == [] and len(ids_for(created_before=future)) == 5
    r = sub.client.get("/v1/submissions", params={"page_token": "garbage"}, headers=sub.acme)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "query.page_token"
    r = sub.client.get("/v1/submissions", params={"state": "DONE"}, headers=sub.acme)
    assert r.status_code == 422


def test_the_poller_batches_stores_and_finishes(sub: Sub) -> None:
    a, b = (sub.submit().json()["id"] for _ in range(2))
    sched = sub.scheduler
    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    sched.states["100"] = JobStatus(state="RUNNING", started_at=start)
    sched.logs["100"] = "step 1\nstep 2\n"
    stats = sub.state.poller.poll_once()
    assert (stats.open, stats.status_calls, stats.updated) == (2, 1, 2)
    assert sorted(sched.status_calls[-1]) == ["100", "101"]  # one call for both jobs
    queued = sub.client.get(f"/v1/submissions/{b}", headers=sub.acme).json()
    assert (queued["state"], queued["reason"]) == ("PENDING", "Priority")
    assert stats.log_calls == 1  # a queued job has no output to read
    doc = sub.client.get(f"/v1/submissions/{a}", headers=sub.acme).json()
    assert doc["state"] == "RUNNING" and doc["started_at"] == start.isoformat()
    assert doc["log_tail"] == "step 1\nstep 2" and doc["polled_at"]
    end = start + timedelta(minutes=3)
    sched.states["100"] = JobStatus(
        state="FAILED", exit_code=2, reason="NonZeroExitCode", started_at=start, finished_at=end
    )
    sched.logs["100"] = "step 1\nTraceback: boom\n"
    sched.states["101"] = JobStatus(state="COMPLETED", exit_code=0, finished_at=end)
    sub.state.poller.poll_once()
    doc = sub.client.get(f"/v1/submissions/{a}", headers=sub.acme).json()
    assert (doc["state"], doc["exit_code"], doc["reason"]) == ("FAILED", 2, "NonZeroExitCode")
    assert doc["finished_at"] == end.isoformat() and "Traceback: boom" in doc["log_tail"]
    assert sub.client.get(f"/v1/submissions/{b}", headers=sub.acme).json()["exit_code"] == 0
    calls = len(sched.status_calls)
    stats = sub.state.poller.poll_once()  # nothing open: the scheduler is not asked
    assert stats.open == 0 and len(sched.status_calls) == calls


def test_the_poller_backs_off_while_the_scheduler_is_down_and_recovers(sub: Sub) -> None:
    sid = sub.submit().json()["id"]
    poller = sub.state.poller
    now = [1000.0]
    poller.clock = lambda: now[0]
    poller.interval_s, poller.max_backoff_s = 5.0, 40.0
    sub.scheduler.down = True
    waits = []
    for _ in range(5):
        stats = poller.poll_once()
        assert "slurm" in stats.unavailable
        waits.append(poller.backoff["slurm"].next_at - now[0])
        assert "slurm" in poller.poll_once().skipped_backends  # asked again only after the wait
        now[0] = poller.backoff["slurm"].next_at
    assert waits == [10.0, 20.0, 40.0, 40.0, 40.0]  # doubling, capped
    sub.scheduler.down = False
    sub.scheduler.states["100"] = JobStatus(state="RUNNING")
    stats = poller.poll_once()
    assert stats.updated == 1 and poller.backoff["slurm"].failures == 0
    assert sub.client.get(f"/v1/submissions/{sid}", headers=sub.acme).json()["state"] == "RUNNING"


def test_the_poller_thread_survives_errors(sub: Sub) -> None:
    """The lifespan's thread keeps polling after a poll raises."""
    poller = sub.state.poller
    calls = []

    def broken() -> Any:
        calls.append(1)
        raise RuntimeError("database went away")

    poller.stop()
    poller.interval_s = 0.01
    poller.poll_once = broken  # type: ignore[method-assign]
    poller.start()
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    while len(calls) < 3 and datetime.now(UTC) < deadline:
        pass
    poller.stop()
    assert len(calls) >= 3


def test_delete_cancels_and_answers_the_document(sub: Sub) -> None:
    sid = sub.submit().json()["id"]
    sub.scheduler.down = True
    r = sub.client.delete(f"/v1/submissions/{sid}", headers=sub.acme)
    assert r.status_code == 503 and "retry-after" in r.headers
    sub.scheduler.down = False
    r = sub.client.delete(f"/v1/submissions/{sid}", headers=sub.acme)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["state"] == "CANCELLED" and doc["cancel_requested_at"] and doc["finished_at"]
    assert sub.scheduler.cancelled == ["100"]
    again = sub.client.delete(f"/v1/submissions/{sid}", headers=sub.acme)
    assert again.status_code == 200 and again.json()["state"] == "CANCELLED"
    assert sub.scheduler.cancelled == ["100"]  # a finished submission is not cancelled again


def _report(sub: Sub) -> dict[str, Any]:
    """A RunReport as profiler.run_plan posts one, with made-up measurements."""
    plan_doc = sub.client.get(f"/v1/plans/{sub.plan_id}", headers=sub.acme).json()
    plan = plan_doc["result"]["plan"]
    return {
        "device": "cpu",
        "backend": "gloo",
        "world_size": plan["num_gpus"],
        "tp": plan["tp"],
        "pp": plan["pp"],
        "dp": plan["dp"],
        "vpp": plan["vpp"],
        "schedule": plan["schedule"],
        "steps": 2,
        "warmup_steps": 1,
        "step_times_s": [0.05, 0.05],
        "step_time_s": 0.05,
        "bubble_fraction": 0.2,
        "stages": [
            {"stage": st["stage"], "rank": st["rank"], "busy_s": 0.01, "peak_memory_bytes": 1e6}
            for st in plan["prediction"]["stages"]
        ],
    }


def _token(sub: Sub, job_id: str) -> str:
    script = sub.scheduler.specs[job_id].script
    words = script.split()
    return words[words.index("--api-key") + 1]


def test_the_report_token_posts_runs_of_its_plan_only(sub: Sub) -> None:
    body = {"backend": "slurm", "report": True, "deployment": {"workdir": WORKDIR}}
    doc = sub.submit(body).json()
    script = sub.scheduler.specs["100"].script
    assert "--report-url http://testserver" in script and f"--plan-id {sub.plan_id}" in script
    token = {"Authorization": f"Bearer {_token(sub, '100')}"}
    report = _report(sub)
    r = sub.client.post(f"/v1/plans/{sub.plan_id}/runs", json=report, headers=token)
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    got = sub.client.get(f"/v1/submissions/{doc['id']}", headers=sub.acme).json()
    assert got["run_ids"] == [run_id]
    runs = sub.client.get(f"/v1/plans/{sub.plan_id}/runs", headers=sub.acme).json()["data"]
    assert [x["id"] for x in runs] == [run_id] and runs[0]["comparison"]
    # nothing else: not another plan's runs, not a read, not a submission
    other = sub.client.post("/v1/plans", json={**cpu_request(), "tags": ["b"]}, headers=sub.acme)
    r = sub.client.post(f"/v1/plans/{other.json()['id']}/runs", json=report, headers=token)
    assert r.status_code == 403
    assert sub.client.get(f"/v1/plans/{sub.plan_id}", headers=token).status_code == 401
    assert sub.client.get("/v1/submissions", headers=token).status_code == 401
    assert sub.client.get(f"/v1/plans/{sub.plan_id}/runs", headers=token).status_code == 401
    bogus = {"Authorization": "Bearer mpr_not-a-token"}
    r = sub.client.post(f"/v1/plans/{sub.plan_id}/runs", json=report, headers=bogus)
    assert r.status_code == 401


def test_the_report_token_expires_with_the_job(sub: Sub) -> None:
    body = {"backend": "slurm", "report": True, "deployment": {"workdir": WORKDIR}}
    sub.submit(body)
    token = {"Authorization": f"Bearer {_token(sub, '100')}"}
    sub.scheduler.states["100"] = JobStatus(state="COMPLETED", exit_code=0)
    sub.state.poller.poll_once()  # the job ended; the grace is 0 s in these tests
    r = sub.client.post(f"/v1/plans/{sub.plan_id}/runs", json=_report(sub), headers=token)
    assert r.status_code == 401 and "expired" in r.json()["detail"]


def test_an_api_key_still_posts_runs(sub: Sub) -> None:
    r = sub.client.post(f"/v1/plans/{sub.plan_id}/runs", json=_report(sub), headers=sub.acme)
    assert r.status_code == 201


def test_no_allowance_means_no_submissions(db_url: str) -> None:
    app = create_app(make_settings(db_url), submitters={"slurm": SchedulerDouble()})
    with TestClient(app) as client:
        acme = new_key(client, "acme")
        plan_id = client.post("/v1/plans", json=cpu_request(), headers=acme).json()["id"]
        r = client.post(
            f"/v1/plans/{plan_id}/submissions",
            json={"backend": "slurm", "deployment": {"workdir": WORKDIR}},
            headers={**acme, "Authorization": acme["Authorization"]},
        )
        assert r.status_code == 403 and "allowed: []" in r.json()["detail"]
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        assert client.get("/v1/submissions", headers=admin).json()["data"] == []


def test_the_plan_page_shows_its_submissions(sub: Sub) -> None:
    body = {"backend": "slurm", "report": True, "deployment": {"workdir": WORKDIR}}
    sid = sub.submit(body).json()["id"]
    token = {"Authorization": f"Bearer {_token(sub, '100')}"}
    run_id = sub.client.post(
        f"/v1/plans/{sub.plan_id}/runs", json=_report(sub), headers=token
    ).json()["id"]
    sub.scheduler.states["100"] = JobStatus(state="FAILED", exit_code=7, reason="NonZeroExitCode")
    sub.scheduler.logs["100"] = "RuntimeError: <boom>\n"
    sub.state.poller.poll_once()
    html = sub.client.get(f"/plans/{sub.plan_id}", headers=sub.acme).text
    section = html[html.index('id="submissions"') :]
    assert f'id="submission-{sid}"' in section and "FAILED" in section
    assert "NonZeroExitCode" in section and ">7<" in section
    assert "RuntimeError: &lt;boom&gt;" in section  # the log tail, escaped
    assert f'href="#run-{run_id}"' in section and f'id="run-{run_id}"' in html


@pytest.mark.parametrize("key", ["partition", "part", "uid", "chdir", "Bad Key", "job-name"])
def test_backend_options_cannot_override_what_the_service_sets(sub: Sub, key: str) -> None:
    body = {"backend": "slurm", "deployment": {"workdir": WORKDIR, "options": {key: "x"}}}
    r = sub.submit(body)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == f"body.deployment.options.{key}"
    assert sub.scheduler.specs == {}


def test_backend_options_reach_the_scheduler(sub: Sub) -> None:
    options = {"qos": "high", "exclusive": ""}
    r = sub.submit({"backend": "slurm", "deployment": {"workdir": WORKDIR, "options": options}})
    assert r.status_code == 201, r.text
    assert dict(sub.scheduler.specs["100"].options) == options


def test_kubernetes_gets_the_pytorchjob_manifest(sub: Sub) -> None:
    import yaml

    kube = sub.kube
    body = {"backend": "kubernetes", "report": True, "deployment": {"image": "img:1"}}
    r = sub.submit(body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    docs = list(yaml.safe_load_all(kube.specs["100"].script))
    job = next(d for d in docs if d["kind"] == "PyTorchJob")
    assert job["metadata"]["name"] == f"meshplan-{sid[:8]}"
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    words = [*master.get("command", []), *master.get("args", [])]
    text = " ".join(words)
    assert master["image"] == "img:1" and "--report-url" in text and sub.plan_id in text
    assert any(d["kind"] == "ConfigMap" for d in docs)  # the plan JSON travels with it


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        ("90", 90),
        ("5:30", 6),  # M:S, rounded up
        ("01:00:00", 60),
        ("00:00:30", 1),
        ("1-12", 36 * 60),  # D-H
        ("2-00:30", 48 * 60 + 30),  # D-H:M
        ("1-00:00:01", 24 * 60 + 1),  # D-H:M:S
        ("UNLIMITED", None),  # Slurm judges the script's own --time
    ],
)
def test_slurm_time_limits_in_minutes(value: str, minutes: int | None) -> None:
    from api.submissions.jobscript import time_limit_min

    assert time_limit_min(value) == minutes


@pytest.mark.parametrize("field", ["time", "output", "error", "account", "workdir"])
def test_a_line_break_cannot_add_sbatch_directives(sub: Sub, field: str) -> None:
    deployment = {"workdir": WORKDIR, field: f"{WORKDIR}\n#SBATCH --uid=0"}
    r = sub.submit({"backend": "slurm", "deployment": deployment})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == f"body.deployment.{field}"
    assert sub.scheduler.specs == {}
