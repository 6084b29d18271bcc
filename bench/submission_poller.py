"""Submission poller cost: one poll over N open submissions, per submission.

Two schedulers:
  - "slurm": the real dev cluster (deploy/slurm/dev-cluster.sh up) through SlurmCliSubmitter;
    N jobs are submitted held (`sbatch --hold`, PENDING: no log tail to read) and cancelled at
    the end. One poll = one `squeue` for all N + the database read and write.
  - "none": a scheduler that answers at once, so the numbers are the service's own part (the
    open-submission query, the state comparison, the batched write).
Rows go through the store into a fresh SQLite file or PostgreSQL database (created and dropped).

    python bench/submission_poller.py [--sizes 10,100,1000] [--db sqlite,postgres]
        [--scheduler none,slurm] [--polls 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from api.settings import Settings  # noqa: E402
from api.store import migrate  # noqa: E402
from api.store.db import make_engine, make_sessionmaker, session_scope  # noqa: E402
from api.store.ids import new_id  # noqa: E402
from api.store.plans import bulk_insert  # noqa: E402
from api.store.tables import SubmissionRow, utcnow  # noqa: E402
from api.submissions.poller import Poller  # noqa: E402
from api.submissions.registry import Submitters  # noqa: E402
from api.submit import JobSpec, JobStatus, SubmitConfig, Submitter, make_submitter  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DEV_CLUSTER = ROOT / "deploy" / "slurm" / "dev-cluster.sh"
TENANT = "bench"


class Instant:
    """A scheduler that says PENDING for every job at once (the service's cost alone)."""

    backend = "slurm"

    def submit(self, spec: JobSpec) -> str:
        return new_id()[:8]

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {i: JobStatus(state="PENDING", reason="JobHeldUser") for i in job_ids}

    def cancel(self, job_id: str) -> None:
        return None

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        return ""


@contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield f"sqlite:///{tmp}/bench.db"
        return
    name = f"meshplan_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def held_jobs(submitter: Submitter, n: int) -> list[str]:
    spec = JobSpec(
        name="mp-bench", script="#!/bin/bash\ntrue\n", options={"hold": ""}, workdir="/tmp"
    )
    return [submitter.submit(spec) for _ in range(n)]


def seed(url: str, job_ids: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "api"))
    from svc_factories import synthetic_rows

    plan = synthetic_rows(1, tenant=TENANT, seed=0)[0]
    now = utcnow()
    engine = make_engine(url)
    with session_scope(make_sessionmaker(engine)) as session:
        bulk_insert(session, rows=[plan])
        for job_id in job_ids:
            session.add(
                SubmissionRow(
                    id=new_id(),
                    tenant=TENANT,
                    plan_id=plan["id"],
                    backend="slurm",
                    framework="meshplan",
                    state="PENDING",
                    scheduler_job_id=job_id,
                    created_at=now,
                    submitted_at=now,
                    log_tail="",
                    report=False,
                    run_ids=[],
                    deployment={},
                )
            )
    engine.dispose()


def measure(db: str, scheduler: str, n: int, polls: int) -> dict[str, Any]:
    if scheduler == "slurm":
        submitter: Submitter = make_submitter("slurm", SubmitConfig(slurm_log_dir="/tmp"))
        job_ids = held_jobs(submitter, n)
    else:
        submitter = Instant()
        job_ids = [str(i) for i in range(n)]
    try:
        with database(db) as url:
            migrate.upgrade(url)
            seed(url, job_ids)
            settings = Settings(database_url=url, submission_poll_interval_s=3600)
            engine = make_engine(url)
            registry = Submitters(settings.submit_config(), {"slurm": submitter})
            poller = Poller(make_sessionmaker(engine), registry, settings)
            poller.poll_once()  # the first poll writes every job's reason; time the steady state
            walls = []
            for _ in range(polls):
                stats = poller.poll_once()
                assert stats.open == n and stats.status_calls == 1, stats
                walls.append(stats.wall_s)
            engine.dispose()
    finally:
        for job_id in job_ids if scheduler == "slurm" else []:
            submitter.cancel(job_id)
    median = statistics.median(walls)
    return {
        "db": db,
        "scheduler": scheduler,
        "open": n,
        "poll_ms": round(median * 1e3, 2),
        "per_submission_ms": round(median * 1e3 / n, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--db", default="sqlite,postgres")
    ap.add_argument("--scheduler", default="none,slurm")
    ap.add_argument("--polls", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    schedulers = a.scheduler.split(",")
    if "slurm" in schedulers:
        up = subprocess.run([str(DEV_CLUSTER), "status"], capture_output=True, check=False)
        if up.returncode != 0:
            print("dev cluster down: slurm rows skipped", file=sys.stderr)
            schedulers.remove("slurm")
    rows = [
        measure(db, sched, int(n), a.polls)
        for sched in schedulers
        for db in a.db.split(",")
        for n in a.sizes.split(",")
    ]
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'scheduler':<10}{'db':<10}{'open':>6}{'poll ms':>10}{'ms / submission':>17}")
    for r in rows:
        print(
            f"{r['scheduler']:<10}{r['db']:<10}{r['open']:>6}{r['poll_ms']:>10}"
            f"{r['per_submission_ms']:>17}"
        )


if __name__ == "__main__":
    main()
