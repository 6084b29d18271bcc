"""`meshplan serve` writes uvicorn's access log only when `MESHPLAN_ACCESS_LOG` asks for it
(Settings.access_log; a line per request costs the API process CPU on every request)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from queue_support import MESHPLAN
from svc_harness import free_port


def _served_log(tmp_path: Path, access_log: str | None) -> str:
    port = free_port()
    env = {**os.environ, "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'meshplan.db'}"}
    env.pop("MESHPLAN_ACCESS_LOG", None)
    if access_log is not None:
        env["MESHPLAN_ACCESS_LOG"] = access_log
    server = subprocess.Popen(
        [*MESHPLAN, "serve", "--dev-open", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "serve did not start"
            time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/plans").status_code == 200
        server.send_signal(signal.SIGTERM)
        log, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=30)
    assert "Finished server process" in log, log[-3000:]
    return log


@pytest.mark.parametrize(("setting", "logged"), [(None, False), ("false", False), ("true", True)])
def test_access_log_only_when_asked(tmp_path: Path, setting: str | None, logged: bool) -> None:
    log = _served_log(tmp_path, setting)
    assert ('"GET /v1/plans HTTP/1.1" 200' in log) is logged, log[-3000:]
