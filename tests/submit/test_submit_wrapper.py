"""deploy/slurm/plan_and_submit.sh, the sbatch-style wrapper, against a live service and the real
dev Slurm cluster: it plans, submits through POST /v1/plans/{id}/submissions, prints the job id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO

from api.app import create_app
from profiler.models import tiny_arch
from tests.api.svc_harness import ADMIN_KEY, free_port, make_settings, serve

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

WRAPPER = REPO / "deploy" / "slurm" / "plan_and_submit.sh"


@dataclass
class Service:
    url: str
    key: str
    tmp: Path

    def wrapper(
        self, *args: str, key: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "MESHPLAN_URL": self.url,
            "MESHPLAN_API_KEY": self.key if key is None else key,
        }
        return subprocess.run([str(WRAPPER), *args], capture_output=True, text=True, env=env,
                              timeout=180, check=False, cwd=cwd)  # fmt: skip

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.key}"})
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def service(slurm_cluster: dict[str, str], tmp_path: Path) -> Iterator[Service]:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'meshplan.db'}",
        submission_tenants={"acme": {"backends": ["slurm"], "partitions": ["cpu"]}},
        submit={"slurm_jobcomp_file": "/var/log/slurm/jobcomp.log"},
        submission_poll_interval_s=0.25,
    )
    with serve(create_app(settings)) as live:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        key = httpx.post(f"{live.url}/v1/keys", json={"tenant": "acme"}, headers=admin).json()
        yield Service(live.url, key["key"], tmp_path)


def _files(tmp: Path) -> tuple[Path, Path, Path]:
    request = {
        "model": json.loads(tiny_arch("gpt").model_dump_json()),
        "cluster": {"gpu": "CPU", "num_gpus": 2},
        "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
        "constraints": {"pp": [2], "micro_batch_sizes": [2], "memory_reserve_gib": 0},
        "search": {"time_limit_s": 5},
    }
    deployment = {"steps": 2, "port": free_port(), "entry_args": ["--warmup", "1"]}
    workdir = tmp / "jobs"
    workdir.mkdir()
    (tmp / "request.json").write_text(json.dumps(request))
    (tmp / "deployment.json").write_text(json.dumps(deployment))
    return tmp / "request.json", tmp / "deployment.json", workdir


def test_wrapper_plans_submits_and_prints_the_slurm_job_id(service: Service) -> None:
    request, deployment, workdir = _files(service.tmp)
    venv_bin = str(Path(sys.executable).parent)
    done = service.wrapper(
        "-p", "cpu", "-t", "00:10:00", "-D", str(workdir), "-J", "wrapped",
        "--deployment", str(deployment), "--no-report",
        "--export", f"PYTHONPATH={REPO}", "--export", f"PATH={venv_bin}:/usr/bin:/bin",
        str(request),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Submitted batch job ")
    job = done.stdout.split()[-1]
    sid = done.stderr.split("/v1/submissions/")[-1].strip()
    deadline = time.monotonic() + 180
    while (doc := service.get(f"/v1/submissions/{sid}"))["state"] not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, doc
        time.sleep(0.25)
    assert doc["scheduler_job_id"] == job
    assert (doc["state"], doc["exit_code"]) == ("COMPLETED", 0), doc["log_tail"]
    assert doc["partition"] == "cpu"
    # a stored plan, run where the wrapper is called (sbatch's default working directory)
    again = service.wrapper("--parsable", "--plan-id", doc["plan_id"], "-p", "cpu",
                            "--deployment", str(deployment), "--no-report",
                            cwd=workdir)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().isdigit() and again.stdout.strip() != job
    sid = again.stderr.split("/v1/submissions/")[-1].strip()
    assert service.get(f"/v1/submissions/{sid}")["scheduler_job_id"] == again.stdout.strip()
    subprocess.run(["scancel", again.stdout.strip()], check=True)


def test_wrapper_reports_the_services_refusal_and_usage_errors(service: Service) -> None:
    request, _, _ = _files(service.tmp)
    refused = service.wrapper("-p", "gpu", str(request))
    assert refused.returncode == 1
    assert "403" in refused.stderr and "gpu" in refused.stderr
    assert service.wrapper("--nodes", "two", str(request)).returncode == 2
    assert service.wrapper("--bogus", str(request)).returncode == 2
    assert service.wrapper(str(request), key="").returncode == 2
