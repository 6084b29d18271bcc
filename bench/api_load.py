"""API load benchmark: PostgreSQL with 100,000 stored plans, a live uvicorn, an httpx client.

Prints p50/p95/p99 latency of
  - GET /v1/plans/{id}                  (goal: p99 <= 20 ms)
  - a filtered history page GET /v1/plans?...   (goal: p95 <= 50 ms)
  - a cached POST /v1/plans             (goal: p95 <= 30 ms)
Plans are bulk-inserted through the store (synthetic rows built from real cost-model
predictions), not solved. The database is created and dropped by this script.

    python bench/api_load.py [--plans 100000] [--requests 500] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "api")]

from svc_factories import synthetic_rows, tiny_request  # noqa: E402
from svc_harness import ADMIN_KEY, free_port, make_settings  # noqa: E402

from api.lifecycle import build_state, start, stop  # noqa: E402
from api.planning import normalise  # noqa: E402
from api.store.db import session_scope  # noqa: E402
from api.store.plans import bulk_insert, insert_plan  # noqa: E402
from planner.specs import PlanRequest  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
GOALS_MS = {"get_plan": ("p99", 20.0), "history_page": ("p95", 50.0), "cached_post": ("p95", 30.0)}


def percentiles(samples_s: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples_s, n=100, method="inclusive")
    return {
        "p50": q[49] * 1e3,
        "p95": q[94] * 1e3,
        "p99": q[98] * 1e3,
        "mean": statistics.fmean(samples_s) * 1e3,
        "n": len(samples_s),
    }


def timed(client: httpx.Client, method: str, url: str, n: int, **kw: Any) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.request(method, url, **kw)
        out.append(time.perf_counter() - t0)
        if r.status_code >= 300:
            raise RuntimeError(f"{method} {url}: {r.status_code} {r.text[:300]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=100_000)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    name = f"meshplan_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        report = run(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", args)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['plans']:,} stored plans on PostgreSQL (inserted in {report['insert_s']:.1f} s)"
    )
    for key, (stat, goal) in GOALS_MS.items():
        r = report["results"][key]
        ok = "ok" if r[stat] <= goal else "MISSED"
        print(
            f"{key:13s} p50 {r['p50']:6.2f} ms  p95 {r['p95']:6.2f} ms  p99 {r['p99']:6.2f} ms"
            f"   goal {stat} <= {goal:.0f} ms: {ok}"
        )


@contextmanager
def server_process(url: str) -> Iterator[str]:
    """uvicorn in its own process (as deployed), so the client does not share its GIL."""
    port = free_port()
    env = {**os.environ, "MESHPLAN_DATABASE_URL": url, "MESHPLAN_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "api.app:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def load(url: str, n: int) -> tuple[float, str]:
    """Bulk-insert `n` synthetic plans and one plan for the cached request; its body."""
    state = build_state(make_settings(url))
    start(state)
    try:
        t0 = time.perf_counter()
        batch = 5_000
        last: dict[str, Any] = {}
        for first in range(0, n, batch):
            rows = synthetic_rows(min(batch, n - first), tenant="bench", seed=first)
            for i, r in enumerate(rows):
                r["id"] = f"{first + i:08d}" + r["id"][8:]
            with session_scope(state.sessions) as session:
                bulk_insert(session, rows=rows)
            last = rows[0]["result"]
        with state.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
        norm = normalise(state, "bench", PlanRequest.model_validate(tiny_request()))
        with session_scope(state.sessions) as session:
            insert_plan(
                session,
                tenant="bench",
                request_hash=norm.request_hash,
                request=norm.document,
                result=last,
                tags=[],
            )
        return time.perf_counter() - t0, norm.request_hash
    finally:
        stop(state)


def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    insert_s, _ = load(url, args.plans)
    body = tiny_request()
    with server_process(url) as base:
        key = httpx.post(
            f"{base}/v1/keys",
            json={"tenant": "bench"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["key"]
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers) as client:
            timed(client, "GET", "/healthz", 20)  # warm the connection
            real = [
                p["id"]
                for p in client.get(
                    "/v1/plans", params={"page_size": 200, "sort": "step_time_s"}
                ).json()["data"]
            ]
            timed(client, "GET", f"/v1/plans/{real[0]}", 20)  # warm the key cache and pool
            get_s: list[float] = []
            for i in range(args.requests):
                get_s += timed(client, "GET", f"/v1/plans/{real[i % len(real)]}", 1)
            hist_s: list[float] = []
            for i in range(args.requests):
                params = {
                    "model_name": f"gpt-{i % 20}",
                    "gpu": "H100-SXM-80GB",
                    "min_gpus": 32,
                    "max_gpus": 256,
                    "page_size": 50,
                }
                hist_s += timed(client, "GET", "/v1/plans", 1, params=params)
            post_s = timed(client, "POST", "/v1/plans", args.requests, json=body)
    return {
        "plans": args.plans,
        "insert_s": insert_s,
        "requests": args.requests,
        "results": {
            "get_plan": percentiles(get_s),
            "history_page": percentiles(hist_s),
            "cached_post": percentiles(post_s),
        },
    }


if __name__ == "__main__":
    main()
