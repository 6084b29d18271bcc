"""Where the API process's CPU goes, route by route: cProfile, timed by each thread's CPU
clock (waits do not count), in every thread of one uvicorn process (the event loop and the
threads the routes' database work runs in), on PostgreSQL with `--plans` stored plans, under
the closed loop of `bench/api_load.py`.

For each of GET /v1/plans/{id}, the filtered history page and the cached POST /v1/plans it
prints the API process's CPU per request (from /proc, profiler overhead included, so larger
than `api_load.py`'s) and the functions with the most cumulative and own time, per request.
The profiler's own overhead inflates functions that make many small calls; read the shares,
not the absolute numbers.

    python bench/api_profile.py [--plans 20000] [--clients 16] [--requests 1000] [--top 30]

`--asgi [--repeat 3]` profiles nothing: it calls the ASGI app in this process (middleware,
routing, routes, the database; no sockets, no client) and prints each route's CPU per request,
the least of `--repeat` runs: the service's own cost, the steadiest number on a shared machine.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import marshal
import os
import pstats
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from api_load import PG_ADMIN, Client, _env, _new_key, _plan_ids, load, run_phase  # noqa: E402
from svc_factories import tiny_request  # noqa: E402
from svc_harness import free_port  # noqa: E402

Make = Callable[[int], tuple[str, str, dict[str, Any] | None]]


# --- the profiled server (`--serve PORT STATS`) ----------------------------------------------

_profiles: list[cProfile.Profile] = []


def _profile_thread(*_: Any) -> None:
    """threading.setprofile's hook: the first event of a new thread gives it its own profiler
    (which then replaces the hook in that thread)."""
    profile = cProfile.Profile(time.thread_time)
    _profiles.append(profile)
    profile.enable()


def serve(port: int, stats_path: str) -> None:
    """uvicorn with every thread profiled; SIGUSR1 clears the profiles, SIGUSR2 writes each
    thread's to `stats_path`.N (pstats' marshal format) and then touches `stats_path`.done."""
    import uvicorn

    def clear(*_: Any) -> None:
        for p in _profiles:
            p.clear()

    def dump(*_: Any) -> None:
        for i, p in enumerate(list(_profiles)):
            p.snapshot_stats()  # while it runs on (dump_stats would disable it)
            stats = p.stats  # type: ignore[attr-defined]
            if stats:  # a thread that ran nothing since the last clear has none
                with open(f"{stats_path}.{i}", "wb") as f:
                    marshal.dump(stats, f)
        Path(stats_path + ".done").touch()

    signal.signal(signal.SIGUSR1, clear)
    signal.signal(signal.SIGUSR2, dump)
    threading.setprofile(_profile_thread)
    main = cProfile.Profile(time.thread_time)
    _profiles.append(main)
    main.enable()
    config = uvicorn.Config(
        "api.app:create_app",
        factory=True,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


# --- the driver ------------------------------------------------------------------------------


def _start(url: str, stats_path: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(port), stats_path]
    proc = subprocess.Popen(argv, cwd=ROOT, env=_env(url))
    deadline = time.monotonic() + 120
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the profiled server did not start")
        time.sleep(0.2)


def _profile_phase(
    proc: subprocess.Popen[bytes], clients: list[Client], n: int, make: Make, stats_path: str
) -> tuple[pstats.Stats, float, int]:
    run_phase(clients, max(len(clients) * 4, n // 10), make)  # warm this route
    os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(0.3)
    phase = run_phase(clients, n, make, proc.pid)
    done = Path(stats_path + ".done")
    for old in Path(stats_path).parent.glob(Path(stats_path).name + ".*"):
        old.unlink()
    os.kill(proc.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if phase.errors:
        print(f"  {len(phase.errors)} errors, first: {phase.errors[:3]}")
    files = sorted(str(p) for p in Path(stats_path).parent.glob(Path(stats_path).name + ".[0-9]*"))
    return pstats.Stats(*files), phase.server_cpu_s / n * 1e3, n


def _print(name: str, stats: pstats.Stats, cpu_ms: float, n: int, top: int) -> None:
    print(f"\n=== {name}: {cpu_ms:.2f} ms API CPU per request under the profiler ({n} requests)")
    for key, title in (("cumulative", "cumulative"), ("tottime", "own time")):
        out = io.StringIO()
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(key).print_stats(top)
        print(f"--- by {title} (seconds over all {n} requests)")
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print("\n".join(lines[start:]))


def drive(args: argparse.Namespace) -> None:
    name = f"meshplan_prof_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    stats_path = f"/tmp/{name}.pstats"
    try:
        load(url, args.plans)
        proc, port = _start(url, stats_path)
        try:
            clients = [Client("127.0.0.1", port, _new_key("127.0.0.1", port))]
            clients += [Client("127.0.0.1", port, clients[0].key) for _ in range(args.clients - 1)]
            ids = _plan_ids(clients[0], 200)
            cached = tiny_request()
            query = "gpu=H100-SXM-80GB&min_gpus=32&max_gpus=256&page_size=50"
            phases: dict[str, Make] = {
                "get_plan": lambda i: ("GET", f"/v1/plans/{ids[i % len(ids)]}", None),
                "history_page": lambda i: (
                    "GET",
                    f"/v1/plans?model_name=gpt-{i % 20}&{query}",
                    None,
                ),
                "cached_post": lambda i: ("POST", "/v1/plans", cached),
            }
            for phase_name, make in phases.items():
                if args.only and phase_name not in args.only:
                    continue
                stats, cpu_ms, n = _profile_phase(proc, clients, args.requests, make, stats_path)
                _print(phase_name, stats, cpu_ms, n, args.top)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    finally:
        for old in Path(stats_path).parent.glob(Path(stats_path).name + ".*"):
            old.unlink()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the ASGI app called directly (`--asgi`) --------------------------------------------------


def _scope(method: str, target: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, bytes]:
    """One request through the whole ASGI app (middleware, routing, the route, the database)."""
    import asyncio

    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return int(messages[0]["status"]), b"".join(m.get("body", b"") for m in messages[1:])


async def _asgi_routes(url: str, args: argparse.Namespace) -> None:
    """CPU (this process, all threads) per request of each route, the app called in-process:
    no sockets, no HTTP parsing, no client, no profiler; least of `--repeat` runs."""
    import json

    from svc_harness import ADMIN_KEY, make_settings

    from api.app import create_app

    app = create_app(make_settings(url, search_queue="procrastinate", migrate_on_start=False))
    async with app.router.lifespan_context(app):
        admin = [
            (b"authorization", f"Bearer {ADMIN_KEY}".encode()),
            (b"content-type", b"application/json"),
        ]
        created = json.dumps({"tenant": "bench"}).encode()
        status, body = await _call(app, _scope("POST", "/v1/keys", admin), created)
        if status != 201:
            raise RuntimeError(f"POST /v1/keys: {status} {body[:200]!r}")
        auth = [(b"authorization", f"Bearer {json.loads(body)['key']}".encode())]
        _, body = await _call(
            app, _scope("GET", "/v1/plans?page_size=200&sort=step_time_s", auth), b""
        )
        ids = [p["id"] for p in json.loads(body)["data"]]
        cached = json.dumps(tiny_request()).encode()
        post = [*auth, (b"content-type", b"application/json")]
        query = "gpu=H100-SXM-80GB&min_gpus=32&max_gpus=256&page_size=50"
        routes: dict[str, Callable[[int], tuple[dict[str, Any], bytes]]] = {
            "get_plan": lambda i: (_scope("GET", f"/v1/plans/{ids[i % len(ids)]}", auth), b""),
            "history_page": lambda i: (
                _scope("GET", f"/v1/plans?model_name=gpt-{i % 20}&{query}", auth),
                b"",
            ),
            "cached_post": lambda i: (_scope("POST", "/v1/plans", post), cached),
        }
        for name, make in routes.items():
            if args.only and name not in args.only:
                continue
            for i in range(min(args.requests, 200)):  # warm: caches, pool, statements
                status, body = await _call(app, *make(i))
                if status >= 300:
                    raise RuntimeError(f"{name}: {status} {body[:200]!r}")
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.process_time()
                for i in range(args.requests):
                    await _call(app, *make(i))
                best = min(best, (time.process_time() - t0) / args.requests)
            print(
                f"{name:13s} {best * 1e3:.3f} ms CPU per request in-process "
                f"(least of {args.repeat} x {args.requests})",
                flush=True,
            )


def asgi(args: argparse.Namespace) -> None:
    import uvloop

    name = f"meshplan_prof_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        load(url, args.plans)
        uvloop.run(_asgi_routes(url, args))
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--plans", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=1_000, help="per route")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--only", nargs="*", help="get_plan, history_page, cached_post")
    ap.add_argument(
        "--asgi",
        action="store_true",
        help="no profiler, no server: call the ASGI app in this process and print each "
        "route's CPU per request (least of --repeat)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="--asgi: runs per route")
    args = ap.parse_args()
    if args.asgi:
        asgi(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
