"""A private PostgreSQL cluster for tests that stop and start the database: `initdb` in a
temporary directory, its own loopback port and socket directory, never the shared server.

PostgreSQL refuses to run as root; as root the binaries run as the `postgres` system user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from svc_harness import free_port

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30
# A connection that arrives once a shutdown has begun is handed to a "dead-end" child that
# only reads the startup packet to refuse it; the postmaster exits after all of them
# (postmaster.c, PostmasterStateMachine: PM_WAIT_DEAD_END "ends when the BackendList is
# entirely empty (ie, no dead_end children remain)"), and such a child waits for that packet
# up to authentication_timeout (60 s by default; PostgreSQL docs, "Connections and
# Authentication"). A client that opened its TCP connection and has not yet written (a thread
# starved on a loaded machine) so holds a fast shutdown that long (tests/api/test_pg_cluster.py
# holds such connections across a stop). Authentication here is `trust` on loopback (milliseconds),
# so 5 s bounds the stop well under STOP_TIMEOUT_S and still leaves a slow client time.
AUTHENTICATION_TIMEOUT_S = 5


def pg_bin(name: str) -> str | None:
    """The newest installed server binary `name` (initdb, pg_ctl), or None."""
    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4])
    )
    return found[-1] if found else (shutil.which(name))


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@dataclass
class PgCluster:
    """One initdb'd cluster; `stop()` and `start()` it at will (fast shutdown)."""

    root: Path
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def _ctl(self, *args: str) -> None:
        ctl = pg_bin("pg_ctl")
        assert ctl is not None
        argv = [ctl, "-D", str(self.data), "-w", "-t", str(STOP_TIMEOUT_S), *args]
        done = subprocess.run(
            _as_server_user(argv),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=max(START_TIMEOUT_S, STOP_TIMEOUT_S) + 10,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {' '.join(args[-1:])} failed ({done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()}\n"
                f"server.log ends:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the cluster's server.log ('' before it exists)."""
        path = self.root / "server.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off"
            f" -c authentication_timeout={AUTHENTICATION_TIMEOUT_S}s"
        )
        self._ctl("-l", str(self.root / "server.log"), "-o", opts, "start")
        self.wait_ready()

    def stop(self) -> None:
        """Fast shutdown: open sessions are terminated, as in a failover or a restart."""
        self._ctl("-m", "fast", "stop")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with psycopg.connect(self.url(driver="postgresql"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name`; its SQLAlchemy URL."""
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def private_cluster() -> Iterator[PgCluster]:
    """initdb, start; on exit stop (immediate) and remove the directory."""
    initdb = pg_bin("initdb")
    if initdb is None:
        raise RuntimeError("initdb not found under /usr/lib/postgresql/*/bin or on PATH")
    root = Path(tempfile.mkdtemp(prefix="meshplan-pg-"))
    (root / "sock").mkdir()
    if os.geteuid() == 0:
        for path in (root, root / "sock"):
            shutil.chown(path, user="postgres", group="postgres")
    cluster = PgCluster(root=root, port=free_port())
    try:
        subprocess.run(
            _as_server_user(
                [initdb, "-D", str(cluster.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )
        cluster.start()
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            subprocess.run(
                _as_server_user(
                    [str(pg_bin("pg_ctl")), "-D", str(cluster.data), "-m", "immediate", "stop"]
                ),
                check=False,
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)
