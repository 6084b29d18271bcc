"""`meshplan calibrate` and `plan|evaluate --calibration` through the real typer app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app
from planner.catalog.efficiency import DEFAULT_EFFICIENCY
from planner.cost import evaluate
from planner.specs import Candidate, PlanRequest

runner = CliRunner()

REQUEST: dict[str, Any] = {
    "model": {
        "family": "gpt",
        "name": "gpt-1b",
        "num_layers": 16,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "vocab_size": 32000,
    },
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 16},
    "training": {"global_batch_size": 64, "seq_length": 2048},
    "search": {"time_limit_s": 5, "top_k": 0},
}
CANDIDATES: list[dict[str, Any]] = [
    {"tp": 8, "pp": 1, "dp": 2, "micro_batch_size": 1, "recompute": "full"},
    {"tp": 2, "pp": 2, "dp": 4, "micro_batch_size": 2},
    {"tp": 4, "pp": 4, "dp": 1, "micro_batch_size": 1, "recompute": "full"},
    {"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 4},
]
TRUTH = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.5, link_fraction=0.6)


def observations() -> list[dict[str, Any]]:
    """'Measured' step times: the cost model's under other constants (TRUTH)."""
    req = PlanRequest.model_validate(REQUEST)
    return [
        {
            "request": REQUEST,
            "candidate": c,
            "measured": {
                "step_time_s": evaluate(
                    req, Candidate.model_validate(c), efficiency=TRUTH
                ).step_time_s
            },
            "source": f"synthetic run {i}",
        }
        for i, c in enumerate(CANDIDATES)
    ]


def write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_calibrate_writes_a_document_that_evaluate_and_plan_use(tmp_path: Path) -> None:
    obs = write(tmp_path / "obs.json", observations())
    out = tmp_path / "cal.json"
    result = runner.invoke(app, ["calibrate", "--observations", obs, "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["gpu"] == "A100-SXM-80GB"
    assert doc["fitted"] == ["matmul_fraction", "link_fraction"]
    assert doc["constants"]["matmul_fraction"] == pytest.approx(0.5, rel=1e-3)
    assert doc["constants"]["link_fraction"] == pytest.approx(0.6, rel=1e-3)
    assert json.loads(out.read_text())["id"] == doc["id"]

    r = write(tmp_path / "r.json", REQUEST)
    c = write(tmp_path / "c.json", CANDIDATES[0])
    args = ["evaluate", "--request", r, "--candidate", c, "--json"]
    plain = json.loads(runner.invoke(app, args).output)
    cal = runner.invoke(app, [*args, "--calibration", str(out)])
    assert cal.exit_code == 0, cal.output
    measured = observations()[0]["measured"]["step_time_s"]
    assert json.loads(cal.output)["step_time_s"] == pytest.approx(measured, rel=1e-3)
    assert plain["step_time_s"] != pytest.approx(measured, rel=0.02)

    planned = runner.invoke(app, ["plan", "--request", r, "--calibration", str(out), "--json"])
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.output)["plan"]["calibration_id"] == doc["id"]


def test_human_output_lists_constants_and_errors(tmp_path: Path) -> None:
    obs = write(tmp_path / "obs.json", observations())
    result = runner.invoke(app, ["calibrate", "--observations", obs, "--scope", "framework=x"])
    assert result.exit_code == 0, result.output
    assert "matmul_fraction" in result.output and "range" in result.output
    assert "(default, not fitted)" in result.output
    assert result.output.count("synthetic run") == len(CANDIDATES)


def test_undetermined_constant_is_one_line_exit_2(tmp_path: Path) -> None:
    obs = write(tmp_path / "obs.json", observations()[:1])
    result = runner.invoke(app, ["calibrate", "--observations", obs])
    assert result.exit_code == 2
    assert "not determined" in result.output
    assert "Traceback" not in result.output
    as_json = runner.invoke(app, ["calibrate", "--observations", obs, "--json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.output)["error"] == "not determined"


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.json", [{"request": REQUEST}])
    result = runner.invoke(app, ["calibrate", "--observations", bad])
    assert result.exit_code == 2
    assert "observations[0]" in result.output
    obs = write(tmp_path / "obs.json", observations())
    unknown = runner.invoke(app, ["calibrate", "--observations", obs, "--fit", "speed"])
    assert unknown.exit_code == 2 and "--fit" in unknown.output


def test_calibration_for_another_gpu_is_refused(tmp_path: Path) -> None:
    obs = write(tmp_path / "obs.json", observations())
    out = tmp_path / "cal.json"
    assert runner.invoke(app, ["calibrate", "--observations", obs, "-o", str(out)]).exit_code == 0
    h100 = dict(REQUEST, cluster={"gpu": "H100", "num_gpus": 16})
    r = write(tmp_path / "r.json", h100)
    c = write(tmp_path / "c.json", CANDIDATES[0])
    result = runner.invoke(
        app, ["evaluate", "--request", r, "--candidate", c, "--calibration", str(out)]
    )
    assert result.exit_code == 2
    assert "is for A100-SXM-80GB" in result.output
