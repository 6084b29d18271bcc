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
