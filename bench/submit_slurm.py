"""Slurm submitters on the real dev cluster (deploy/slurm/dev-cluster.sh up), both transports.

- latency: a trivial job (`true`), from submit() returning to status() reading RUNNING and
  COMPLETED (polled every 20 ms), and how long submit() itself takes;
- status cost: one status() call for N open jobs (held with --hold, so PENDING: nothing runs),
  cancelled at the end.

  python bench/submit_slurm.py [--transports cli,rest] [--repeat 5] [--sizes 1,10,100,500]
      [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from api.submit import JobSpec, SubmitConfig, Submitter, make_submitter  # noqa: E402

SOCKET = "/run/slurmrestd/slurmrestd.socket"
JOBCOMP = "/var/log/slurm/jobcomp.log"


def submitter(transport: str) -> Submitter:
    common: dict[str, Any] = {"slurm_jobcomp_file": JOBCOMP, "slurm_log_dir": "/tmp"}
    if transport == "rest":
        common |= {"slurm_transport": "rest", "slurmrestd_url": "http://slurmrestd",
                   "slurmrestd_socket": SOCKET}  # fmt: skip
    return make_submitter("slurm", SubmitConfig(**common))


def latency(s: Submitter, repeat: int) -> dict[str, float]:
    submit_s, running_s, completed_s = [], [], []
    for i in range(repeat):
        t0 = time.monotonic()
        job = s.submit(JobSpec(name=f"bench-{i}", script="#!/bin/sh\ntrue\n"))
        t1 = time.monotonic()
        seen_running = None
        while True:
            st = s.status([job])[job]
            if st.state != "PENDING" and seen_running is None:
                seen_running = time.monotonic()
            if st.final:
                break
            time.sleep(0.02)
        t2 = time.monotonic()
        submit_s.append(t1 - t0)
        running_s.append((seen_running or t2) - t1)
        completed_s.append(t2 - t1)
    return {
        "submit_median_s": statistics.median(submit_s),
        "to_running_median_s": statistics.median(running_s),
        "to_running_max_s": max(running_s),
        "to_completed_median_s": statistics.median(completed_s),
        "to_completed_max_s": max(completed_s),
    }


def status_cost(s: Submitter, n: int, polls: int = 5) -> dict[str, float]:
    spec = JobSpec(name="bench-held", script="#!/bin/sh\ntrue\n", options={"hold": ""})
    jobs = [s.submit(spec) for _ in range(n)]
    try:
        times = []
        for _ in range(polls):
            t0 = time.monotonic()
            answer = s.status(jobs)
            times.append(time.monotonic() - t0)
            assert all(answer[j].state == "PENDING" for j in jobs), answer
    finally:
        for j in jobs:
            s.cancel(j)
    best = min(times)
    return {"jobs": n, "poll_s": best, "per_job_ms": 1000 * best / n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--transports", default="cli,rest")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sizes", default="1,10,100,500")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out: dict[str, Any] = {}
    for transport in a.transports.split(","):
        s = submitter(transport)
        out[transport] = {
            "latency": latency(s, a.repeat),
            "status": [status_cost(s, int(n)) for n in a.sizes.split(",")],
        }
    if a.json:
        print(json.dumps(out, indent=2))
        return
    for transport, r in out.items():
        lat = r["latency"]
        print(f"{transport}: submit {lat['submit_median_s'] * 1000:.0f} ms; to RUNNING median "
              f"{lat['to_running_median_s']:.2f} s (max {lat['to_running_max_s']:.2f}); "
              f"to COMPLETED median {lat['to_completed_median_s']:.2f} s "
              f"(max {lat['to_completed_max_s']:.2f})")  # fmt: skip
        for row in r["status"]:
            print(f"  status() of {row['jobs']:4d} open jobs: {row['poll_s'] * 1000:7.1f} ms "
                  f"({row['per_job_ms']:.2f} ms per job)")  # fmt: skip


if __name__ == "__main__":
    main()
