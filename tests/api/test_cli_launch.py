"""`meshplan launch` through the real typer app: plan files, a stored plan fetched from a live
service, files written with their modes, JSON output and refusals."""

from __future__ import annotations

import json
import shlex
import stat
from pathlib import Path

import httpx
import pytest
from svc_factories import evaluated_result, tiny_request
from svc_harness import ADMIN_KEY, Live
from typer.testing import CliRunner

from api.cli import app
from api.store.db import session_scope
from api.store.plans import insert_plan
from planner.plan import Plan

runner = CliRunner()


def real_plan(candidate: dict[str, object]) -> Plan:
    """A plan for the tiny GPT on 4 GPUs, predicted by the real cost model."""
    return Plan.model_validate(evaluated_result(tiny_request(), candidate)["plan"])


PLAN = real_plan({"tp": 2, "pp": 2, "dp": 1, "schedule": "1f1b"})


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("shape", ["bare", "plan --json", "service"])
def test_plan_file_in_any_shape(tmp_path: Path, shape: str) -> None:
    plan_doc = PLAN.model_dump(mode="json")
    doc = {
        "bare": plan_doc,
        "plan --json": {"plan": plan_doc, "alternatives": [], "search": {"mode": "optimal"}},
        "service": {"id": "p1", "result": {"plan": plan_doc, "alternatives": []}},
    }[shape]
    args = ["launch", "--plan-file", _write(tmp_path, doc), "--target", "torchrun", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert set(out) == {"files", "commands", "notes"}
    assert [f["name"] for f in out["files"]] == ["launch.sh", "plan.json"]
    assert {"name", "content", "mode"} <= set(out["files"][0])
    (command,) = out["commands"]
    assert "--nproc-per-node 4" in command


def test_output_dir_gets_the_files_with_their_modes(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    args = ["launch", "--plan-file", _write(tmp_path, PLAN.model_dump(mode="json")),
            "--target", "slurm", "--framework", "megatron", "--nodes", "1", "--partition", "gpu",
            "--env", "NCCL_DEBUG=WARN", "-o", str(out_dir)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    script = out_dir / "job.sbatch"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    text = script.read_text()
    assert "#SBATCH --partition=gpu" in text and "export NCCL_DEBUG=WARN" in text
    assert "sbatch job.sbatch" in result.output


def test_unsupported_plan_exits_3_with_reasons(tmp_path: Path) -> None:
    plan = real_plan({"dp": 4, "zero_stage": 1})
    args = ["launch", "--plan-file", _write(tmp_path, plan.model_dump(mode="json")),
            "--target", "torchrun", "--framework", "torchtitan", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 3
    doc = json.loads(result.output)
    assert doc["framework"] == "torchtitan" and "ZeRO-1/2" in doc["reasons"][0]["example"]
    assert doc["reasons"][0]["kind"] == "zero_stage" and doc["reasons"][0]["count"] == 1


def test_deployment_that_does_not_fit_names_the_field(tmp_path: Path) -> None:
    args = ["launch", "--plan-file", _write(tmp_path, PLAN.model_dump(mode="json")),
            "--target", "torchrun", "--nodes", "3", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert json.loads(result.output)["field"] == "deployment.nodes"


def test_exactly_one_plan_source(tmp_path: Path) -> None:
    result = runner.invoke(app, ["launch", "--target", "torchrun"])
    assert result.exit_code == 2
    assert "--plan-file or --plan-id" in result.output


def test_plan_id_fetched_from_a_live_service(live_server: Live) -> None:
    r = httpx.post(f"{live_server.url}/v1/keys", json={"tenant": "acme"},
                   headers={"Authorization": f"Bearer {ADMIN_KEY}"})  # fmt: skip
    assert r.status_code == 201, r.text
    key = r.json()["key"]
    req = tiny_request()
    result_doc = evaluated_result(req, {"tp": 1, "pp": 2, "dp": 2, "schedule": "gpipe"})
    with session_scope(live_server.app.state.meshplan.sessions) as session:
        plan_id = insert_plan(session, tenant="acme", request_hash="h" * 64, request=req,
                              result=result_doc, tags=[]).id  # fmt: skip
    args = ["launch", "--plan-id", plan_id, "--url", live_server.url, "--api-key", key,
            "--target", "torchrun", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    (command,) = out["commands"]
    words = shlex.split(command)
    assert words[words.index("--nproc-per-node") + 1] == "4"
    stored = json.loads(next(f["content"] for f in out["files"] if f["name"] == "plan.json"))
    assert stored == result_doc["plan"]
    missing = runner.invoke(app, [*args[:2], "nope", *args[3:]])
    assert missing.exit_code == 2 and "404" in missing.output
