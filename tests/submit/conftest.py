"""Fixtures for the submitter tests: the real dev Slurm cluster (skipped when it is down)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from api.submit import JobStatus, Submitter

REPO = Path(__file__).resolve().parents[2]
DEV_CLUSTER = REPO / "deploy" / "slurm" / "dev-cluster.sh"


def cluster_status() -> dict[str, str]:
    """`dev-cluster.sh status` as {"up": "", "partition": "cpu", "slurmrestd": "unix:...", ...};
    empty when the cluster is down."""
    done = subprocess.run([str(DEV_CLUSTER), "status"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {}
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        found[key] = value
    return found


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    status = cluster_status()
    if not status:
        pytest.skip(f"the dev Slurm cluster is down: run `sudo {DEV_CLUSTER} up`")
    return status


def wait_for(
    submitter: Submitter,
    job_id: str,
    done: Callable[[JobStatus], bool],
    *,
    timeout_s: float = 60.0,
) -> JobStatus:
    """Poll `status` until `done` holds; fail with the last status after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = submitter.status([job_id])[job_id]
        if done(status):
            return status
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} still {status} after {timeout_s} s")
        time.sleep(0.2)
