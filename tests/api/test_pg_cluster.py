"""The private cluster's fast stop is bounded even while clients are half-way through
connecting (pg_cluster.AUTHENTICATION_TIMEOUT_S)."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import psycopg
import pytest
from pg_cluster import AUTHENTICATION_TIMEOUT_S, STOP_TIMEOUT_S, pg_bin, private_cluster


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.skipif(pg_bin("initdb") is None, reason="PostgreSQL server binaries not found")
def test_stop_does_not_wait_on_connections_that_never_send_their_startup_packet() -> None:
    with private_cluster() as cluster:
        session = psycopg.connect(cluster.url(driver="postgresql"))  # a backend to terminate
        silent: list[socket.socket] = []
        stopping = threading.Event()

        def connect_during_the_stop() -> None:
            stopping.wait()
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:  # a TCP connection, no startup packet: a dead-end child waits on it
                    silent.append(socket.create_connection(("127.0.0.1", cluster.port), 1))
                except OSError:  # the postmaster stopped listening
                    return
                time.sleep(0.01)

        opener = threading.Thread(target=connect_during_the_stop, daemon=True)
        opener.start()
        t0 = time.monotonic()
        stopping.set()
        try:
            cluster.stop()
        except subprocess.TimeoutExpired:
            pytest.fail("pg_ctl stop did not return")
        took = time.monotonic() - t0
        opener.join(timeout=5)
        for s in silent:
            s.close()
        session.close()
        assert silent, "no connection was opened during the shutdown"
        assert "database system is shut down" in cluster.log_tail(5)
        assert took < AUTHENTICATION_TIMEOUT_S + 10 < STOP_TIMEOUT_S, took
