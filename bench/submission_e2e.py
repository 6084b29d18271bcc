"""POST -> RUNNING and POST -> COMPLETED for the tiny 2-CPU-rank plan on the dev Slurm cluster.

A live uvicorn service on SQLite (poller interval --poll-interval, 0.2 s by default: the
numbers are as fine as it), the tiny GPT planned for 2 CPU ranks, then --runs submissions one
after another (framework meshplan, report true, 2 measured steps, 1 warm-up): sbatch -> srun ->
torchrun -> profiler.run_plan -> RunReport posted back. Times are seen by a client polling
GET /v1/submissions/{id} every 50 ms.

    sudo deploy/slurm/dev-cluster.sh up
    python bench/submission_e2e.py [--runs 3] [--poll-interval 0.2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "api")]

from svc_harness import ADMIN_KEY, free_port, make_settings, serve  # noqa: E402
from test_submissions import cpu_request  # noqa: E402

from api.app import create_app  # noqa: E402

FINAL = ("COMPLETED", "FAILED", "CANCELLED")


def one_run(url: str, auth: dict[str, str], plan_id: str, workdir: str) -> dict[str, Any]:
    deployment = {
        "workdir": workdir,
        "partition": "cpu",
        "time": "00:10:00",
        "steps": 2,
        "port": free_port(),
        "entry_args": ["--warmup", "1"],
        "env": {
            "PYTHONPATH": str(ROOT),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        },
    }
    body = {"backend": "slurm", "framework": "meshplan", "report": True, "deployment": deployment}
    t0 = time.monotonic()
    r = httpx.post(f"{url}/v1/plans/{plan_id}/submissions", json=body, headers=auth, timeout=60)
    r.raise_for_status()
    post_s = time.monotonic() - t0
    sid = r.json()["id"]
    running_s = None
    while True:
        doc = httpx.get(f"{url}/v1/submissions/{sid}", headers=auth).json()
        if running_s is None and doc["state"] != "PENDING":
            running_s = time.monotonic() - t0
        if doc["state"] in FINAL:
            break
        time.sleep(0.05)
    done_s = time.monotonic() - t0
    if doc["state"] != "COMPLETED":
        raise SystemExit(f"submission {sid} ended {doc['state']}: {doc['log_tail']}")
    return {"post_s": post_s, "running_s": running_s, "completed_s": done_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--poll-interval", type=float, default=0.2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = make_settings(
            f"sqlite:///{tmp}/bench.db",
            submission_tenants={"*": {"backends": ["slurm"], "partitions": ["cpu"]}},
            submit={"slurm_jobcomp_file": "/var/log/slurm/jobcomp.log"},
            submission_poll_interval_s=a.poll_interval,
        )
        with serve(create_app(settings)) as live:
            admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
            key = httpx.post(f"{live.url}/v1/keys", json={"tenant": "b"}, headers=admin).json()
            auth = {"Authorization": f"Bearer {key['key']}"}
            plan = httpx.post(f"{live.url}/v1/plans", json=cpu_request(), headers=auth, timeout=60)
            plan.raise_for_status()
            rows = [one_run(live.url, auth, plan.json()["id"], tmp) for _ in range(a.runs)]
    summary = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    if a.json:
        print(json.dumps({"runs": rows, "median": summary}, indent=2))
        return
    print(f"{'run':>4}{'POST s':>9}{'-> RUNNING s':>14}{'-> COMPLETED s':>16}")
    for i, r in enumerate(rows):
        print(f"{i:>4}{r['post_s']:>9.2f}{r['running_s']:>14.2f}{r['completed_s']:>16.2f}")
    s = summary
    print(f" med{s['post_s']:>9.2f}{s['running_s']:>14.2f}{s['completed_s']:>16.2f}")


if __name__ == "__main__":
    main()
