"""bench/planning_benchmark.py through its function API on one tiny request: a search in a
fresh pinned process whose row carries the plan the search finds in this process, and a
summary that counts and checks what it is given. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

from bench.planning_benchmark import (
    CASES,
    REQUEST_GOALS,
    Goals,
    default_cpu,
    format_row,
    load_cases,
    measure,
    summarize,
)
from planner.search import search
from planner.specs import PlanRequest

TINY = {
    "model": {
        "family": "gpt",
        "name": "tiny",
        "num_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "vocab_size": 1024,
    },
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 4},
    "training": {"global_batch_size": 8, "seq_length": 256},
    "search": {"time_limit_s": 20, "top_k": 0, "workers": 1},
}


def test_one_tiny_case_runs_in_a_pinned_child_and_reports_its_plan() -> None:
    request = PlanRequest.model_validate(TINY)
    row = measure("tiny", request, repeat=2, cpu=default_cpu())
    here = search(request)
    p = here.plan
    assert row["status"] == here.search.status == "OPTIMAL"
    assert row["step_time_s"] == p.prediction.step_time_s
    cp = f" cp={p.cp}({p.cp_comm})" if p.cp > 1 else ""  # ep, etp: a dense model has none
    assert row["plan"].startswith(f"tp={p.tp}{cp} pp={p.pp} dp={p.dp} vpp={p.vpp} {p.schedule} ")
    assert len(row["wall_times_s"]) == 2
    assert row["wall_s"] == min(row["wall_times_s"])
    assert row["cpu_s"] > 0
    spread = max(row["wall_times_s"]) - min(row["wall_times_s"])  # of the rounded times
    assert abs(row["spread_s"] - spread) <= 0.0015
    assert "tiny" in format_row(row) and "OPTIMAL" in format_row(row)


def test_summary_counts_optimal_rows_and_checks_the_goals() -> None:
    rows = [
        {"wall_s": 0.2, "status": "OPTIMAL"},
        {"wall_s": 0.6, "status": "OPTIMAL"},
        {"wall_s": 4.0, "status": "FEASIBLE"},
    ]
    s = summarize(rows, REQUEST_GOALS)
    assert (s["count"], s["optimal"], s["median_s"], s["max_s"]) == (3, 2, 0.6, 4.0)
    assert not s["goals_met"]  # one request is not OPTIMAL
    assert summarize(rows[:2], Goals(median_s=0.5, max_s=3.0))["goals_met"]
    assert not summarize(rows[:2], Goals(median_s=0.3, max_s=3.0))["goals_met"]
    # a proven gap within the goal's counts, a larger or unknown one does not
    near = [*rows[:2], {"wall_s": 0.9, "status": "FEASIBLE", "gap": 0.004}]
    assert summarize(near, Goals(median_s=1.0, max_s=5.0, gap=0.005))["within_gap"] == 3
    assert summarize(near, Goals(median_s=1.0, max_s=5.0, gap=0.003))["within_gap"] == 2
    assert not summarize(near, Goals(median_s=1.0, max_s=5.0))["goals_met"]


def test_the_cases_are_valid_requests_and_the_filter_selects_by_name(tmp_path: Path) -> None:
    cases = load_cases()
    assert len(cases) >= 16
    assert {r.constraints.framework for _, r in cases} >= {"megatron", "torchtitan", "deepspeed"}
    assert {r.objective for _, r in cases} == {"time", "bubble"}
    (tmp_path / "tiny-a.json").write_text(json.dumps(TINY))
    (tmp_path / "other.json").write_text(json.dumps(TINY))
    assert [n for n, _ in load_cases(tmp_path, "tiny")] == ["tiny-a"]
    assert CASES.name == "cases"
