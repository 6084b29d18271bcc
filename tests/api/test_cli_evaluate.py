"""`meshplan evaluate` through the real typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app

runner = CliRunner()

REQUEST = {
    "model": {
        "family": "gpt",
        "name": "gpt-small",
        "num_layers": 8,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "vocab_size": 32000,
    },
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 16},
    "training": {"global_batch_size": 64, "seq_length": 1024},
}


def write(tmp_path: Path, request: object, candidate: object) -> tuple[str, str]:
    r, c = tmp_path / "r.json", tmp_path / "c.json"
    r.write_text(json.dumps(request))
    c.write_text(json.dumps(candidate))
    return str(r), str(c)


def test_json_prediction(tmp_path: Path) -> None:
    r, c = write(tmp_path, REQUEST, {"tp": 2, "pp": 2, "dp": 4, "recompute": "full"})
    result = runner.invoke(app, ["evaluate", "--request", r, "--candidate", c, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["feasible"] is True
    assert doc["tokens_per_s"] == pytest.approx(64 * 1024 / doc["step_time_s"])
    assert len(doc["ranks"]) == 2
    assert doc["hardware_tflops_per_gpu"] > doc["model_tflops_per_gpu"] > 0


def test_human_summary(tmp_path: Path) -> None:
    r, c = write(tmp_path, REQUEST, {"tp": 2, "pp": 2, "dp": 4})
    result = runner.invoke(app, ["evaluate", "--request", r, "--candidate", c])
    assert result.exit_code == 0, result.output
    assert "step time" in result.output
    assert "fits" in result.output


def test_contextual_error_names_the_field(tmp_path: Path) -> None:
    r, c = write(tmp_path, REQUEST, {"tp": 2, "pp": 2, "dp": 2})
    result = runner.invoke(app, ["evaluate", "--request", r, "--candidate", c, "--json"])
    assert result.exit_code != 0
    doc = json.loads(result.output)
    assert doc["field"] == "candidate.tp*pp*dp"
    assert "16" in doc["error"]


def test_invalid_candidate_json(tmp_path: Path) -> None:
    r, c = write(tmp_path, REQUEST, {"tp": 0})
    result = runner.invoke(app, ["evaluate", "--request", r, "--candidate", c, "--json"])
    assert result.exit_code != 0
    assert "tp" in json.loads(result.output)["detail"]
