"""API load benchmark: PostgreSQL with 100,000 stored plans, one API process (uvicorn in a
subprocess), `--clients` concurrent clients (16), each on its own keep-alive connection
(HTTP/1.1 over TCP, raw asyncio streams, all clients on one event loop).

Prints p50/p95/p99 latency and throughput of
  - GET /v1/plans/{id}                          (goal: p99 <= 20 ms)
  - a filtered history page GET /v1/plans?...   (goal: p95 <= 50 ms)
  - a cached POST /v1/plans                     (goal: p95 <= 30 ms)
  - new searches: POST /v1/plans of requests never seen, searches completed per second
and the errors (any non-2xx or broken connection; goal: 0). By default each client sends its
next request as soon as the previous one is answered (a closed loop, no think time): the
service is kept saturated, and by Little's law the mean latency is clients / throughput.
`--rate R` sends R requests a second in all instead (an open loop; latency counted from when
each request was due): the latency at a given load. The API process's CPU per request (from
/proc) is printed too: it bounds one process's throughput and depends less on the machine's
other load than the latencies do; beside it, this process's (the clients') and PostgreSQL's
(the backends of the bench's database) CPU per request, the rest of a round trip's cost on
a machine that runs all three. Plans are bulk-inserted with PostgreSQL's COPY
(synthetic rows built from real cost-model predictions), not solved. The database is created
and dropped by this script. The rate limit is off in the API process (the bench measures the
service, not the limiter).

`--worker` also starts `meshplan worker --concurrency 1` (PostgreSQL's search queue), so the
searches run there; it is skipped with a message where this tree has no worker command.
The API runs `meshplan serve`'s HTTP protocol (api/http_protocol.py); `--http httptools`:
uvicorn's own.

    python bench/api_load.py [--plans 100000] [--clients 16] [--requests 2000] [--rate R]
                             [--searches 32] [--worker] [--http P] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "api")]

from svc_factories import synthetic_rows, tiny_request  # noqa: E402
from svc_harness import ADMIN_KEY, free_port, make_settings  # noqa: E402

from api.cli import LAZY_COMMANDS  # noqa: E402
from api.lifecycle import build_state, start, stop  # noqa: E402
from api.planning import normalise  # noqa: E402
from api.store.db import session_scope  # noqa: E402
from api.store.plans import insert_plan  # noqa: E402
from api.store.tables import PlanRow  # noqa: E402
from planner.specs import PlanRequest  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
GOALS_MS = {"get_plan": ("p99", 20.0), "history_page": ("p95", 50.0), "cached_post": ("p95", 30.0)}
JSON_COLUMNS = frozenset({"request", "result", "tags"})


def percentiles(samples_s: list[float]) -> dict[str, float]:
    if len(samples_s) < 2:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "n": len(samples_s)}
    q = statistics.quantiles(samples_s, n=100, method="inclusive")
    return {
        "p50": q[49] * 1e3,
        "p95": q[94] * 1e3,
        "p99": q[98] * 1e3,
        "mean": statistics.fmean(samples_s) * 1e3,
        "n": len(samples_s),
    }


# --- clients ------------------------------------------------------------------------------


_LOOP = asyncio.new_event_loop()
"""The clients' one event loop: their connections stay open across phases."""


@dataclass
class Client:
    """One caller: a keep-alive HTTP/1.1 connection over TCP on raw asyncio streams, all
    clients on one event loop in this process: about half the CPU per request of
    http.client in threads (the load generator shares the machine with the service)."""

    host: str
    port: int
    key: str
    _reader: asyncio.StreamReader | None = field(default=None, init=False)
    _writer: asyncio.StreamWriter | None = field(default=None, init=False)

    async def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, bytes]:
        """(status, body); status 0 when the connection broke (reopened on the next call)."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Authorization: Bearer {self.key}\r\nContent-Length: {len(data)}\r\n"
            + ("Content-Type: application/json\r\n" if body is not None else "")
            + "\r\n"
        )
        try:
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            assert self._reader is not None
            self._writer.write(head.encode() + data)
            status, headers = _head(await self._reader.readuntil(b"\r\n\r\n"))
            if headers.get("transfer-encoding", "").lower() == "chunked":
                content = await _chunks(self._reader)
            else:
                content = await self._reader.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection", "").lower() == "close":
                self.close()
            return status, content
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            self.close()
            return 0, b""

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (names lowercased) of a response head."""
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    """A chunked body (RFC 9112 section 7.1), trailers skipped."""
    out = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return bytes(out)
        out += await reader.readexactly(size + 2)
        del out[-2:]


def call(client: Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One request outside a phase; its JSON body (RuntimeError unless 2xx)."""
    status, content = _LOOP.run_until_complete(client.request(method, path, body))
    if not 200 <= status < 300:
        raise RuntimeError(f"{method} {path}: {status or 'connection lost'} {content[:200]!r}")
    return json.loads(content)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds process `pid` has used (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    database_cpu_s: float = 0.0

    def report(self) -> dict[str, Any]:
        n = len(self.latencies_s)
        return {
            **percentiles(self.latencies_s),
            "per_s": n / self.wall_s if self.wall_s else 0.0,
            "wall_s": self.wall_s,
            # the API process's CPU per request: what bounds one process's throughput
            # (1 / this), and less sensitive to the machine's other load than latency
            "server_cpu_ms": self.server_cpu_s / n * 1e3 if n else 0.0,
            # the load generator's own CPU (this process) and PostgreSQL's (the backends
            # serving this database, the API's and the worker's), per request: the rest of
            # the round trip's cost on this machine
            "client_cpu_ms": self.client_cpu_s / n * 1e3 if n else 0.0,
            "database_cpu_ms": self.database_cpu_s / n * 1e3 if n else 0.0,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
        }


def run_phase(
    clients: list[Client],
    requests: int,
    make: Callable[[int], tuple[str, str, dict[str, Any] | None]],
    server_pid: int = 0,
    rate: float = 0.0,
    database: str | None = None,
) -> Phase:
    """`requests` requests, `make(i)` -> (method, path, body), spread over the clients.
    rate 0: each client sends its next request as soon as the last is answered (closed loop).
    rate > 0: request i is due at start + i / rate (open loop, `rate` a second in all) and its
    latency counts from when it was due, so a late answer also delays the requests queued
    behind it on that client (no coordinated omission)."""
    phase = Phase()
    counter = iter(range(requests))

    async def loop(client: Client) -> None:
        while (i := next(counter, None)) is not None:
            method, path, body = make(i)
            t0 = time.perf_counter()
            if rate > 0:
                due = start + i / rate
                if due > t0:
                    await asyncio.sleep(due - t0)
                t0 = due
            status, _ = await client.request(method, path, body)
            phase.latencies_s.append(time.perf_counter() - t0)
            if not 200 <= status < 300:
                phase.errors.append(f"{method} {path}: {status or 'connection lost'}")

    async def all_clients() -> None:
        await asyncio.gather(*(loop(c) for c in clients))

    db0 = {pid: cpu_s(pid) for pid in database_pids(database)}
    cpu0, client0, t0 = cpu_s(server_pid), time.process_time(), time.perf_counter()
    start = t0
    _LOOP.run_until_complete(all_clients())
    phase.wall_s = time.perf_counter() - t0
    phase.server_cpu_s = cpu_s(server_pid) - cpu0
    phase.client_cpu_s = time.process_time() - client0
    # backends alive throughout (one that started or ended within the phase is not counted)
    db1 = {pid: cpu_s(pid) for pid in database_pids(database)}
    phase.database_cpu_s = sum(db1[pid] - db0[pid] for pid in db0.keys() & db1.keys())
    return phase


def database_pids(database: str | None) -> list[int]:
    """The PostgreSQL backends connected to `database` now (the API's pool, the worker's)."""
    if not database:
        return []
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return [int(pid) for (pid,) in rows]


# --- the database -------------------------------------------------------------------------


def load(url: str, n: int) -> tuple[float, str]:
    """COPY `n` synthetic plans (and their tags) in, and one real plan for the cached request;
    returns the seconds it took and the cached request's hash."""
    state = build_state(make_settings(url))
    start(state)  # migrations
    try:
        t0 = time.perf_counter()
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        batch = 10_000
        last: dict[str, Any] = {}
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            for first in range(0, n, batch):
                rows = synthetic_rows(min(batch, n - first), tenant="bench", seed=first)
                columns = [c.name for c in PlanRow.__table__.columns if c.name in rows[0]]
                with cur.copy(f"COPY plans ({', '.join(columns)}) FROM STDIN") as copy:
                    for i, r in enumerate(rows):
                        r["id"] = f"{first + i:08d}" + r["id"][8:]
                        r["request_hash"] = f"{first + i:064x}"
                        r["created_at"] = r["created_at"].astimezone(UTC).replace(tzinfo=None)
                        copy.write_row(
                            [json.dumps(r[c]) if c in JSON_COLUMNS else r[c] for c in columns]
                        )
                with cur.copy("COPY plan_tags (plan_id, tag, tenant) FROM STDIN") as copy:
                    for r in rows:
                        for tag in r["tags"]:
                            copy.write_row([r["id"], tag, r["tenant"]])
                last = rows[0]["result"]
            conn.commit()
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


# --- processes ----------------------------------------------------------------------------


def _env(url: str) -> dict[str, str]:
    return {
        **os.environ,
        # this tree first, then the caller's own path (e.g. packages installed beside the venv)
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "MESHPLAN_DATABASE_URL": url,
        "MESHPLAN_BOOTSTRAP_ADMIN_KEY": ADMIN_KEY,
        "MESHPLAN_RATE_LIMIT_PER_S": "0",
        "MESHPLAN_MIGRATE_ON_START": "false",
        "MESHPLAN_SOLVER_WORKERS": "1",  # one search at a time: searches per core
    }


COALESCING = "api.http_protocol:CoalescingHttpToolsProtocol"


@contextmanager
def server_process(url: str, protocol: str = COALESCING) -> Iterator[tuple[str, int, int]]:
    """uvicorn in its own process (as deployed), so the clients do not share its GIL; `protocol`
    is its `--http` (by default the protocol `meshplan serve` runs where this tree has it)."""
    port = free_port()
    argv = ["-m", "uvicorn", "--factory", "api.app:create_app", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    if protocol != COALESCING or (ROOT / "api" / "http_protocol.py").exists():
        argv += ["--http", protocol]
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=_env(url))
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        yield "127.0.0.1", port, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@contextmanager
def worker_process(url: str) -> Iterator[bool]:
    """`meshplan worker --concurrency 1`, if this tree has the command; yields whether it runs."""
    if "worker" not in LAZY_COMMANDS:
        print("--worker: this tree has no `meshplan worker` command; searches run in the API")
        yield False
        return
    argv = ["-c", "from api.cli import main; main()", "worker", "--concurrency", "1"]
    # the worker's own lines go to stderr: stdout is this bench's (--json) document
    proc = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=_env(url), stdout=sys.stderr.fileno()
    )
    try:
        time.sleep(2.0)
        if proc.poll() is not None:
            raise RuntimeError(f"meshplan worker exited with {proc.returncode}")
        yield True
    finally:
        proc.terminate()
        proc.wait(timeout=330)


def _new_key(host: str, port: int) -> str:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = json.dumps({"tenant": "bench"}).encode()
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    conn.request("POST", "/v1/keys", body=body, headers=headers)
    response = conn.getresponse()
    doc = json.loads(response.read())
    if response.status != 201:
        raise RuntimeError(f"POST /v1/keys: {response.status} {doc}")
    return str(doc["key"])


def _plan_ids(client: Client, n: int) -> list[str]:
    page = call(client, "GET", f"/v1/plans?page_size={n}&sort=step_time_s")
    return [p["id"] for p in page["data"]]


# --- the run ------------------------------------------------------------------------------


def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    insert_s, _ = load(url, args.plans)
    cached = tiny_request()
    with ExitStack() as stack:
        host, port, pid = stack.enter_context(server_process(url, args.http))
        worker = stack.enter_context(worker_process(url)) if args.worker else False
        if not args.worker and "worker" in LAZY_COMMANDS:
            print("no --worker: new searches run only if the API runs them itself")
        clients = [Client(host, port, _new_key(host, port)) for _ in range(args.clients)]
        ids = _plan_ids(clients[0], 200)
        run_phase(clients, 4 * args.clients, lambda i: ("GET", "/healthz", None))  # connect
        # warm: the key cache, the connection pool, and the database's cache of these rows
        run_phase(clients, len(ids), lambda i: ("GET", f"/v1/plans/{ids[i]}", None))

        def history(i: int) -> tuple[str, str, None]:
            query = f"model_name=gpt-{i % 20}&gpu=H100-SXM-80GB&min_gpus=32&max_gpus=256"
            return "GET", f"/v1/plans?{query}&page_size=50", None

        def new_search(i: int) -> tuple[str, str, dict[str, Any]]:
            # a request never planned before (another model name), the same search each time
            body = tiny_request()
            body["model"] = {**body["model"], "name": f"tiny-gpt-new-{i}"}
            return "POST", "/v1/plans", body

        db = url.rsplit("/", 1)[1]
        phases = {
            "get_plan": run_phase(
                clients,
                args.requests,
                lambda i: ("GET", f"/v1/plans/{ids[i % len(ids)]}", None),
                pid,
                args.rate,
                db,
            ),
            "history_page": run_phase(clients, args.requests, history, pid, args.rate, db),
            "cached_post": run_phase(
                clients,
                args.requests,
                lambda i: ("POST", "/v1/plans", cached),
                pid,
                args.rate,
                db,
            ),
            "new_search": run_phase(clients, args.searches, new_search, pid, database=db),
        }
    return {
        "plans": args.plans,
        "insert_s": insert_s,
        "clients": args.clients,
        "requests": args.requests,
        "rate": args.rate,
        "worker": worker,
        "results": {name: phase.report() for name, phase in phases.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--plans", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2_000, help="per latency phase")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests a second, all clients together (open loop); 0: closed loop",
    )
    ap.add_argument("--searches", type=int, default=32, help="new searches (closed loop)")
    ap.add_argument("--worker", action="store_true", help="also run `meshplan worker`")
    ap.add_argument(
        "--http",
        default=COALESCING,
        help="uvicorn's --http: `meshplan serve`'s protocol by default; httptools: uvicorn's own",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    name = f"meshplan_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    load_before = os.getloadavg()
    try:
        report = run(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", args)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    report["loadavg_before"] = load_before
    report["loadavg_after"] = os.getloadavg()
    report["cpus"] = os.cpu_count()
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['plans']:,} stored plans on PostgreSQL (COPY in {report['insert_s']:.1f} s), "
        f"{report['clients']} clients, "
        f"{f'{args.rate:g} requests/s' if args.rate else 'closed loop'}, "
        f"1 API process, worker: {report['worker']}; "
        f"load average {load_before[0]:.1f} -> {report['loadavg_after'][0]:.1f} "
        f"on {report['cpus']} CPUs"
    )
    for key, r in report["results"].items():
        stat, goal = GOALS_MS.get(key, ("", 0.0))
        verdict = ""
        if stat:
            verdict = f"   goal {stat} <= {goal:.0f} ms: {'ok' if r[stat] <= goal else 'MISSED'}"
        print(
            f"{key:13s} p50 {r['p50']:7.2f} ms  p95 {r['p95']:7.2f} ms  p99 {r['p99']:7.2f} ms"
            f"  {r['per_s']:7.1f}/s  CPU ms/req: server {r['server_cpu_ms']:.2f}"
            f" client {r['client_cpu_ms']:.2f} database {r['database_cpu_ms']:.2f}"
            f"  errors {r['errors']}{verdict}"
        )
        for e in r["first_errors"]:
            print(f"    {e}")


if __name__ == "__main__":
    main()
