"""`meshplan plan`'s live search line: configurations settled, incumbent, bound and gap on a
terminal; nothing when piped or with --json."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_support import meshplan, run_on_terminal, write_json
from svc_factories import tiny_request

from api.cli.progress import search_line
from planner.search import SearchProgress, search
from planner.specs import PlanRequest


def test_the_line_states_each_number_of_a_report() -> None:
    reports: list[SearchProgress] = []
    search(PlanRequest.model_validate(tiny_request()), on_progress=reports.append)
    last = reports[-1]
    assert last.lower_bound_s is not None and last.incumbent_s is not None
    line = search_line(last)
    assert line.startswith(f"{last.settled}/{last.total} configurations settled, ")
    assert f"best {last.incumbent_s:.4g} s" in line
    assert f"bound {last.lower_bound_s:.4g} s" in line and "gap 0.00%" in line
    first = SearchProgress(0.0, 0, 12, None, None, None, 0.0)
    assert search_line(first) == "0/12 configurations settled"


def test_the_live_line_is_drawn_on_a_terminal_only(tmp_path: Path) -> None:
    request = write_json(tmp_path / "request.json", tiny_request())
    code, stdout, terminal = run_on_terminal(["plan", "--request", request])
    assert code == 0, terminal
    shown = re.findall(r"(\d+)/(\d+) configurations settled", terminal)
    assert shown, terminal
    assert all(int(a) <= int(b) for a, b in shown)
    assert "configurations settled" not in stdout and "tp=" in stdout
    code, stdout, terminal = run_on_terminal(["plan", "--request", request, "--json"])
    assert code == 0 and "configurations settled" not in terminal
    assert json.loads(stdout)["search"]["gap"] == 0.0
    piped = meshplan("plan", "--request", request)
    assert piped.returncode == 0 and piped.stderr == ""


def test_the_printed_plan_states_an_open_gap_and_missing_alternatives(tmp_path: Path) -> None:
    cut = tiny_request(search={"time_limit_s": 0.001, "top_k": 2})
    proc = meshplan("plan", "--request", write_json(tmp_path / "cut.json", cut))
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0]
    if "FEASIBLE" in head:  # cut short: the gap and the bound are on the first line
        assert re.search(r"gap \d+\.\d\d% to the bound [0-9.]+ (ms|s)", head), head
    else:
        assert "OPTIMAL" in head and "gap" not in head
    one = {"tp": [1], "cp": [1], "pp": [1], "micro_batch_sizes": [1], "zero_stages": [1]}
    few = tiny_request(constraints=one)  # a single configuration: no alternative exists
    few["search"] = {"time_limit_s": 10, "top_k": 3}
    doc = json.loads(
        meshplan("plan", "--request", write_json(tmp_path / "few.json", few), "--json").stdout
    )
    note = doc["search"]["alternatives_note"]
    assert doc["alternatives"] == [] and note is not None
    assert note.startswith("0 of 3: no other configuration")
    printed = meshplan("plan", "--request", str(tmp_path / "few.json")).stdout
    assert f"alternatives   {note}" in printed
