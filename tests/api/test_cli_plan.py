"""`meshplan plan` through the real typer app."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from api.cli.plan import EXAMPLES

runner = CliRunner()


def test_plan_json_document(tmp_path: Path) -> None:
    svg = tmp_path / "t.svg"
    res = runner.invoke(app, ["plan", "--example", "article-pp8", "--json", "--svg", str(svg)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert set(doc) == {"plan", "alternatives", "search"}
    plan = doc["plan"]
    assert plan["pp"] == 8 and plan["prediction"]["step_time_s"] > 0
    assert doc["search"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert svg.read_text().startswith("<svg")


def test_plan_human_output(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(EXAMPLES["article-pp8"]))
    res = runner.invoke(app, ["plan", "--request", str(path)])
    assert res.exit_code == 0, res.output
    assert "tp=1 pp=8" in res.output and "why:" in res.output


def test_infeasible_exits_non_zero_with_diagnosis(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(EXAMPLES["article-pp8"]))
    doc["constraints"] = {"memory_cap_gib": 2, "pp": [8], "tp": [1], "recompute": ["none"]}
    doc["objective"] = "time"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["plan", "--request", str(path)])
    assert res.exit_code != 0
    assert "infeasible" in res.output
    res = runner.invoke(app, ["plan", "--request", str(path), "--json"])
    assert res.exit_code != 0
    out = json.loads(res.output)
    assert out["error"] == "infeasible" and out["diagnosis"]["binding"] == "memory"
    assert out["diagnosis"]["over_by_gib"] > 0
