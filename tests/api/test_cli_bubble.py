"""`meshplan bubble` through the real typer app."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["bubble", *args])
    return result.exit_code, result.output


def test_json_result_fields() -> None:
    code, out = run(
        "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
        "--fw-s", "0.01", "--bw-s", "0.02", "--json",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["bubble_fraction"] == pytest.approx(3 / 11)
    assert doc["step_time_s"] == pytest.approx(0.03 * 11)
    assert doc["peak_inflight"] == [4, 3, 2, 1]
    assert len(doc["timeline"]) == 4
    first = doc["timeline"][0][0]
    assert first == {"action": "0F0", "start_s": 0.0, "end_s": 0.01}


def test_per_stage_lists_and_zero_bubble_w() -> None:
    code, out = run(
        "--schedule", "zbv", "--pp", "2", "--microbatches", "4",
        "--fw-s", "1,1,1,1", "--bw-s", "2", "--w-s", "1", "--p2p-s", "0.1", "--json",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["vpp"] == 2
    kinds = {e["action"][1] for row in doc["timeline"] for e in row}
    assert kinds == {"F", "I", "W"}
    spans = {e["action"]: e["end_s"] - e["start_s"] for row in doc["timeline"] for e in row}
    assert spans["0I0"] == pytest.approx(1.0) and spans["0W0"] == pytest.approx(1.0)


def test_wrong_list_length_is_an_error_naming_the_field() -> None:
    code, out = run(
        "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
        "--fw-s", "1,2", "--bw-s", "2", "--json",
    )  # fmt: skip
    assert code == 2
    doc = json.loads(out)
    assert "fw_s" in doc["detail"] and "pp*vpp = 4" in doc["detail"]


def test_not_a_number() -> None:
    code, out = run("--pp", "2", "--microbatches", "2", "--fw-s", "a", "--bw-s", "1")
    assert code == 2
    assert "--fw-s='a'" in out


def test_missing_options() -> None:
    code, out = run("--schedule", "1f1b", "--fw-s", "1")
    assert code == 2
    assert "--pp" in out and "--bw-s" in out and "--microbatches" in out


def test_table_text_and_json() -> None:
    code, out = run("--table")
    assert code == 0, out
    assert "27.3%" in out  # P=4, M=8: 3/11 for both GPipe and 1F1B
    code, out = run("--table", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert len(rows) == 60
    row = next(
        r for r in rows if r["schedule"] == "1f1b" and r["pp"] == 8 and r["num_microbatches"] == 64
    )
    assert row["bubble_fraction"] == pytest.approx(7 / 71)
    assert row["activation_microbatches"] == 8


def test_target_bubble() -> None:
    code, out = run(
        "--schedule", "1f1b", "--pp", "8", "--target-bubble", "0.1",
        "--fw-s", "1", "--bw-s", "2", "--json",
    )  # fmt: skip
    assert code == 0, out
    doc = json.loads(out)
    assert doc["num_microbatches"] == 63  # 7/(63+7) = 0.1
    code, out = run(
        "--schedule", "1f1b", "--pp", "8", "--target-bubble", "0.1", "--fw-s", "1", "--bw-s", "2"
    )
    assert "M = 63" in out


def test_svg_written(tmp_path: Path) -> None:
    target = tmp_path / "t.svg"
    code, out = run(
        "--schedule", "interleaved-1f1b", "--pp", "2", "--microbatches", "4",
        "--fw-s", "1", "--bw-s", "2", "--svg", str(target),
    )  # fmt: skip
    assert code == 0, out
    root = ET.fromstring(target.read_text())
    boxes = [e for e in root.iter() if e.get("class") == "action"]
    assert len(boxes) == 2 * 2 * 2 * 4
