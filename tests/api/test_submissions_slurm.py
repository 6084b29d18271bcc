"""End to end against the real dev Slurm cluster (deploy/slurm/dev-cluster.sh) and a live
uvicorn service: POST /v1/plans/{id}/submissions -> sbatch -> srun -> torchrun ->
profiler.run_plan -> the RunReport posted back with the report token -> COMPLETED with the run
on the submission and the plan. And the service's faults: a failing job, DELETE of a running
job, slurmctld stopped. Skipped when the cluster is down (CI brings it up)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from svc_factories import cpu_request
from svc_harness import ADMIN_KEY, free_port, make_settings, serve

from api.app import create_app
from api.state import AppState

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DEV_CLUSTER = REPO / "deploy" / "slurm" / "dev-cluster.sh"
JOBCOMP = "/var/log/slurm/jobcomp.log"
PARTITION = "cpu"


def cluster_up() -> bool:
    done = subprocess.run([str(DEV_CLUSTER), "status"], capture_output=True, check=False)
    return done.returncode == 0


@dataclass
class Cluster:
    url: str
    state: AppState
    auth: dict[str, str]
    plan_id: str
    workdir: Path

    def deployment(self, **kw: Any) -> dict[str, Any]:
        """Where the job runs: this checkout's code and the venv's python, through the
        deployment's environment and working directory (nothing hard-coded in the script)."""
        venv_bin = str(Path(sys.executable).parent)
        env = {
            "PYTHONPATH": str(REPO),
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        }
        doc = {
            "workdir": str(self.workdir),
            "partition": PARTITION,
            "time": "00:10:00",
            "steps": 2,
            "port": free_port(),
            "env": env,
            "entry_args": ["--warmup", "1"],
        }
        doc.update(kw)
        return doc

    def submit(self, deployment: dict[str, Any], *, report: bool = True) -> httpx.Response:
        body = {"backend": "slurm", "framework": "meshplan", "report": report}
        return httpx.post(
            f"{self.url}/v1/plans/{self.plan_id}/submissions",
            json={**body, "deployment": deployment},
            headers=self.auth,
            timeout=60,
        )

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.url}{path}", headers=self.auth, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def wait(
        self, sid: str, done: Callable[[dict[str, Any]], bool], timeout_s: float = 180.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            doc = self.get(f"/v1/submissions/{sid}")
            if done(doc):
                return doc
            assert time.monotonic() < deadline, f"submission still {doc}"
            time.sleep(0.1)


@contextmanager
def live_cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    if not cluster_up():
        pytest.skip(f"the dev Slurm cluster is down: run `sudo {DEV_CLUSTER} up`")
    settings = make_settings(
        db_url,
        submission_tenants={"acme": {"backends": ["slurm"], "partitions": [PARTITION]}},
        submit={"slurm_jobcomp_file": JOBCOMP, "retry_after_s": 15},
        submission_poll_interval_s=0.25,
        submission_poll_max_backoff_s=1.0,
    )
    with serve(create_app(settings)) as live:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        key = httpx.post(f"{live.url}/v1/keys", json={"tenant": "acme"}, headers=admin).json()
        auth = {"Authorization": f"Bearer {key['key']}"}
        r = httpx.post(f"{live.url}/v1/plans", json=cpu_request(), headers=auth, timeout=60)
        assert r.status_code == 201, r.text
        workdir = tmp_path / "jobs"
        workdir.mkdir()
        yield Cluster(live.url, live.app.state.meshplan, auth, r.json()["id"], workdir)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """The end to end on SQLite and on PostgreSQL."""
    with live_cluster(db_url, tmp_path) as c:
        yield c


@pytest.fixture
def sqlite_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The faults on SQLite only: their database side is the same code the end to end and
    tests/api/test_submissions.py run on both databases; each costs a Slurm job."""
    with live_cluster(f"sqlite:///{tmp_path / 'meshplan.db'}", tmp_path) as c:
        yield c


def test_a_plan_runs_on_slurm_and_reports_its_measured_run(cluster: Cluster) -> None:
    t0 = time.monotonic()
    r = cluster.submit(cluster.deployment())
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    running = cluster.wait(sid, lambda d: d["state"] != "PENDING")
    to_running_s = time.monotonic() - t0
    done = cluster.wait(sid, lambda d: d["state"] in ("COMPLETED", "FAILED", "CANCELLED"))
    to_completed_s = time.monotonic() - t0
    print(f"\nPOST -> {running['state']} {to_running_s:.2f} s, -> COMPLETED {to_completed_s:.2f} s")
    assert (done["state"], done["exit_code"]) == ("COMPLETED", 0), done["log_tail"]
    assert done["started_at"] and done["finished_at"] and done["scheduler_job_id"].isdigit()
    assert len(done["run_ids"]) == 1
    runs = cluster.get(f"/v1/plans/{cluster.plan_id}/runs")["data"]
    assert [run["id"] for run in runs] == done["run_ids"]
    comparison = runs[0]["comparison"]["step_time_s"]
    assert comparison["measured"] > 0 and comparison["predicted"] > 0  # side by side
    report = runs[0]["report"]
    assert (report["device"], report["world_size"], report["steps"]) == ("cpu", 2, 2)
    plan = cluster.get(f"/v1/plans/{cluster.plan_id}")
    assert [s["id"] for s in plan["submissions"]] == [sid]
    page = httpx.get(f"{cluster.url}/plans/{cluster.plan_id}", headers=cluster.auth).text
    assert f'id="submission-{sid}"' in page and f'href="#run-{done["run_ids"][0]}"' in page


def test_a_failing_job_ends_failed_with_its_exit_code_and_log_tail(
    sqlite_cluster: Cluster,
) -> None:
    cluster = sqlite_cluster
    # the runner refuses a negative warm-up: argparse exits 2 in both ranks, torchrun fails
    r = cluster.submit(cluster.deployment(entry_args=["--warmup", "-1"]))
    assert r.status_code == 201, r.text
    done = cluster.wait(r.json()["id"], lambda d: d["state"] in ("COMPLETED", "FAILED"))
    assert done["state"] == "FAILED" and done["exit_code"] not in (None, 0), done
    assert "--warmup must be >= 0" in done["log_tail"]
    assert done["run_ids"] == []


def test_delete_of_a_running_job_ends_cancelled(sqlite_cluster: Cluster) -> None:
    cluster = sqlite_cluster
    r = cluster.submit(cluster.deployment(steps=10_000_000), report=False)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    cluster.wait(sid, lambda d: d["state"] == "RUNNING")
    r = httpx.delete(f"{cluster.url}/v1/submissions/{sid}", headers=cluster.auth, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["cancel_requested_at"]
    done = cluster.wait(sid, lambda d: d["state"] != "RUNNING", timeout_s=60)
    assert done["state"] == "CANCELLED", done


def test_slurmctld_stopped_is_503_records_nothing_and_the_poller_recovers(
    sqlite_cluster: Cluster,
) -> None:
    cluster = sqlite_cluster
    r = cluster.submit(cluster.deployment(), report=True)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    pid = Path("/run/slurm/slurmctld.pid").read_text().strip()
    subprocess.run(["kill", pid], check=True)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists():
            assert time.monotonic() < deadline, "slurmctld did not stop"
            time.sleep(0.1)
        r = cluster.submit(cluster.deployment())
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "15"
        assert r.headers["content-type"].startswith("application/problem+json")
        assert [d["id"] for d in cluster.get("/v1/submissions")["data"]] == [sid]
        deadline = time.monotonic() + 30
        while not cluster.state.poller.backoff["slurm"].failures:
            assert time.monotonic() < deadline, "the poller never met the outage"
            time.sleep(0.1)
    finally:
        subprocess.run([str(DEV_CLUSTER), "up"], check=True, capture_output=True)
    done = cluster.wait(sid, lambda d: d["state"] in ("COMPLETED", "FAILED", "CANCELLED"))
    assert (done["state"], done["exit_code"]) == ("COMPLETED", 0), done["log_tail"]
    assert cluster.state.poller.backoff["slurm"].failures == 0
    assert len(done["run_ids"]) == 1
