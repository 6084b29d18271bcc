"""End to end with the service: plan through `POST /v1/plans`, fetch the stored plan, run it
with the runner (which POSTs its RunReport to the live service), and read the measured run set
against the prediction from `GET /v1/plans/{id}/runs`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from run_plan_support import free_port, run_forked

from api.app import create_app
from api.settings import Settings
from planner.plan import Plan
from profiler.models import tiny_arch

ADMIN_KEY = "runner-test-admin-" + "k" * 24

pytestmark = pytest.mark.slow


@pytest.fixture
def service(tmp_path: Path) -> Iterator[str]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'meshplan.db'}",
        bootstrap_admin_key=ADMIN_KEY,
        solver_workers=1,
    )
    port = free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_stored_plan_runs_and_reports_back(service: str, tmp_path: Path) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    key = httpx.post(f"{service}/v1/keys", json={"tenant": "acme"}, headers=admin).json()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    request = {
        "model": json.loads(tiny_arch("gpt").model_dump_json()),
        "cluster": {"gpu": "CPU", "num_gpus": 2},
        "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
        "constraints": {"pp": [2], "micro_batch_sizes": [2], "memory_reserve_gib": 0},
        "search": {"time_limit_s": 5},
    }
    r = httpx.post(f"{service}/v1/plans", json=request, headers=auth, timeout=60)
    assert r.status_code == 201, r.text
    plan_id = r.json()["id"]
    stored = httpx.get(f"{service}/v1/plans/{plan_id}", headers=auth).json()
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    plan = Plan.model_validate(stored["result"]["plan"])
    assert plan.pp == 2

    run_forked(
        plan,
        tmp_path,
        "--plan", str(tmp_path / "stored.json"), "--steps", "2",
        "--report-url", service, "--api-key", key,
    )  # fmt: skip

    runs = httpx.get(f"{service}/v1/plans/{plan_id}/runs", headers=auth).json()["data"]
    assert len(runs) == 1
    report = runs[0]["report"]
    assert report["plan_id"] == plan_id and report["pp"] == 2 and report["steps"] == 2
    assert report["schedule"] == plan.schedule
    assert len(report["stages"]) == plan.pp * plan.vpp
    assert runs[0]["comparison"], "the service sets the run against the prediction"
