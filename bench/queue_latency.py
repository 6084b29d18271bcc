"""Search latency through the PostgreSQL queue against the in-process pool.

Sends N distinct small requests (tiny GPT, each with its own tag so each is a new search)
one after another, waiting for each plan, to an app on PostgreSQL twice: once with
`search_queue=procrastinate` and one `meshplan worker` process, once with
`search_queue=pool`. Prints p50/p95/max of the end-to-end POST time, and the queue's
overhead (p50 difference). Then the throughput of C concurrent clients through one worker of
concurrency C. The databases are created and dropped by this script.

    python bench/queue_latency.py [--requests 20] [--clients 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "api")]

from fastapi.testclient import TestClient  # noqa: E402
from queue_support import fresh_database, queue_settings, start_worker, stop  # noqa: E402
from svc_factories import tiny_request  # noqa: E402
from svc_harness import make_settings, new_key  # noqa: E402

from api.app import create_app  # noqa: E402


def _timed_posts(client: TestClient, key: dict[str, str], tags: list[str]) -> list[float]:
    times = []
    for tag in tags:
        start = time.perf_counter()
        r = client.post("/v1/plans", json=tiny_request(tags=[tag]), headers=key)
        times.append(time.perf_counter() - start)
        assert r.status_code == 201, r.text
    return times


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "n": len(ordered),
        "p50_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[max(0, round(0.95 * len(ordered)) - 1)],
        "max_ms": 1000 * ordered[-1],
    }


def queue_run(requests: int, clients: int) -> dict[str, Any]:
    with fresh_database() as url:
        worker = start_worker(url, concurrency=clients)
        try:
            with TestClient(create_app(queue_settings(url, migrate_on_start=False))) as client:
                key = new_key(client, "bench")
                _timed_posts(client, key, ["warm-up"])
                sequential = _timed_posts(client, key, [f"q{i}" for i in range(requests)])
                start = time.perf_counter()
                threads = [
                    threading.Thread(
                        target=_timed_posts,
                        args=(client, key, [f"c{c}-{i}" for i in range(requests)]),
                    )
                    for c in range(clients)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - start
        finally:
            stop(worker)
    return {
        "sequential": _summary(sequential),
        "concurrent_searches_per_s": clients * requests / wall,
    }


def pool_run(requests: int) -> dict[str, Any]:
    with (
        fresh_database() as url,
        TestClient(create_app(make_settings(url, search_queue="pool"))) as client,
    ):
        key = new_key(client, "bench")
        _timed_posts(client, key, ["warm-up"])
        times = _timed_posts(client, key, [f"p{i}" for i in range(requests)])
    return {"sequential": _summary(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    queued = queue_run(args.requests, args.clients)
    pooled = pool_run(args.requests)
    doc = {
        "queue": queued,
        "pool": pooled,
        "queue_overhead_p50_ms": queued["sequential"]["p50_ms"] - pooled["sequential"]["p50_ms"],
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    for name in ("queue", "pool"):
        s = doc[name]["sequential"]
        print(
            f"{name:5s} sequential n={s['n']}: p50 {s['p50_ms']:.0f} ms, "
            f"p95 {s['p95_ms']:.0f} ms, max {s['max_ms']:.0f} ms"
        )
    print(f"queue overhead (p50): {doc['queue_overhead_p50_ms']:.0f} ms")
    rate = queued["concurrent_searches_per_s"]
    print(
        f"queue, {args.clients} clients, worker concurrency {args.clients}: {rate:.1f} searches/s"
    )


if __name__ == "__main__":
    main()
