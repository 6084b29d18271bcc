"""`meshplan submit` and `meshplan submissions` through the real typer app against a live
uvicorn service (the scheduler stand-in at the Submitter seam; the dev cluster's end to end is
tests/api/test_submissions_slurm.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from submit_double import SchedulerDouble
from svc_factories import cpu_request
from svc_harness import ADMIN_KEY, Live, make_settings, serve
from typer.testing import CliRunner

from api.app import create_app
from api.cli import app
from api.submit import JobStatus

runner = CliRunner()


@dataclass
class EndsWith(SchedulerDouble):
    """With `advance`, each poll moves a job on: PENDING -> RUNNING -> FAILED, exit code 3
    (with a traceback in its log)."""

    advance: bool = True

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        out = super().status(job_ids)
        for job_id in job_ids if self.advance else ():
            self.logs[job_id] = "step 1\nRuntimeError: boom\n"
            done = JobStatus(state="FAILED", exit_code=3, reason="NonZeroExitCode")
            self.states[job_id] = (
                done if out[job_id].state == "RUNNING" else JobStatus(state="RUNNING")
            )
        return out


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Live, str, EndsWith]]:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'cli.db'}",
        submission_tenants={"acme": {"backends": ["slurm"], "partitions": ["cpu"]}},
        submission_poll_interval_s=0.05,
    )
    scheduler = EndsWith()
    with serve(create_app(settings, submitters={"slurm": scheduler})) as server:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        key = httpx.post(f"{server.url}/v1/keys", json={"tenant": "acme"}, headers=admin)
        yield server, key.json()["key"], scheduler


def _cli(live: tuple[Live, str, EndsWith], *args: str) -> tuple[int, str]:
    server, key, _ = live
    r = runner.invoke(
        app,
        [*args, "--url", server.url, "--api-key", key],
    )
    return r.exit_code, r.stdout


def test_submit_plans_submits_waits_and_exits_with_the_jobs_code(
    live: tuple[Live, str, EndsWith], tmp_path: Path
) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(cpu_request()))
    code, out = _cli(
        live,
        "submit", "--request", str(request), "--backend", "slurm", "--partition", "cpu",
        "--workdir", "/srv/jobs", "--env", "PYTHONPATH=/srv/code", "--steps", "3",
        "--wait", "--poll-interval", "0.1", "--json",
    )  # fmt: skip
    assert code == 3, out
    doc = json.loads(out)
    assert (doc["state"], doc["exit_code"]) == ("FAILED", 3)
    assert "RuntimeError: boom" in doc["log_tail"]
    spec = live[2].specs[doc["scheduler_job_id"]]
    assert spec.partition == "cpu" and "export PYTHONPATH=/srv/code" in spec.script
    assert "--steps 3" in spec.script and "--report-url" in spec.script  # meshplan reports
    code, out = _cli(live, "submissions", "list", "--json")
    assert code == 0 and [d["id"] for d in json.loads(out)["data"]] == [doc["id"]]
    code, out = _cli(live, "submissions", "show", doc["id"])
    assert code == 0 and "FAILED" in out and "exit 3" in out and "RuntimeError: boom" in out


def test_submit_a_stored_plan_then_cancel(live: tuple[Live, str, EndsWith]) -> None:
    server, key, scheduler = live
    auth = {"Authorization": f"Bearer {key}"}
    plan_id = httpx.post(f"{server.url}/v1/plans", json=cpu_request(), headers=auth, timeout=60)
    args = ("submit", "--plan-id", plan_id.json()["id"], "--backend", "slurm",
            "--partition", "cpu", "--workdir", "/srv/jobs", "--no-report", "--json")  # fmt: skip
    scheduler.advance = False
    code, out = _cli(live, *args)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["state"] == "PENDING" and doc["report"] is False
    code, out = _cli(live, "submissions", "cancel", doc["id"], "--json")
    assert code == 0 and json.loads(out)["state"] == "CANCELLED"
    assert scheduler.cancelled == [doc["scheduler_job_id"]]


def test_refusals_are_one_line_with_exit_2(live: tuple[Live, str, EndsWith]) -> None:
    server, key, _ = live
    auth = {"Authorization": f"Bearer {key}"}
    plan_id = httpx.post(f"{server.url}/v1/plans", json=cpu_request(), headers=auth, timeout=60)
    r = runner.invoke(
        app,
        ["submit", "--plan-id", plan_id.json()["id"], "--backend", "slurm", "--partition", "gpu",
         "--url", server.url, "--api-key", key],
    )  # fmt: skip
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "403" in r.stderr and "partition 'gpu'" in r.stderr
    code, _ = _cli(live, "submissions", "show", "nope")
    assert code == 2
    code, _ = _cli(live, "submit", "--backend", "slurm")  # neither --request nor --plan-id
    assert code == 2
