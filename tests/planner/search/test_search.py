"""search(): time limit, the bubble objective, infeasibility diagnosis, exhaustive guard."""

from __future__ import annotations

import time

import pytest

from planner.errors import InfeasibleError, SpecError
from planner.plan import Plan
from planner.search import search
from planner.search.driver import memory_rep, run_search
from planner.search.explain import why
from planner.search.outcome import MemoryGroup
from planner.search.space import enumerate_configs

from .helpers import GPT_13B, SLACK_S
from .helpers import gpt_request as _request


def test_a_tiny_time_limit_still_returns_a_feasible_plan() -> None:
    req = _request(search={"time_limit_s": 0.05, "top_k": 2})
    result = search(req, clock=time.monotonic)
    assert result.search.status == "FEASIBLE"
    assert result.plan.prediction.feasible
    assert result.plan.world_size == 64  # tp * cp * pp * dp
    # it stopped at the limit (plus one uninterruptible step: test_time_limit.SLACK_S), with
    # configurations left unsettled, instead of finishing the search
    assert result.search.wall_time_s <= 0.05 + SLACK_S
    assert result.search.gap is not None and result.search.gap > 0


def test_the_articles_question_8_stages_under_10_percent_bubble() -> None:
    # An 8-stage pipeline (pp=8) asked for the smallest bubble under a 40 GiB cap.
    req = _request(
        model={**GPT_13B, "num_layers": 14, "hidden_size": 4096, "num_attention_heads": 32},
        constraints={
            "memory_cap_gib": 40,
            "pp": [8],
            "tp": [1],
            "micro_batch_sizes": [1, 2],
            "zero_stages": [1],
        },
        objective="bubble",
        search={"time_limit_s": 20, "top_k": 3},
    )
    result = search(req, clock=time.monotonic)
    plan = result.plan
    assert plan.pp == 8
    assert plan.prediction.bubble_fraction < 0.10
    assert plan.prediction.peak_memory_bytes <= plan.prediction.memory_cap_bytes
    text = " ".join(plan.why)
    assert "micro-batches" in text and "activations" in text and plan.schedule in text
    assert "Trade-off" in text  # names the schedules it weighed, with their memory
    # The alternatives it weighed trade a larger bubble for something else.
    assert all(
        a.prediction.bubble_fraction >= plan.prediction.bubble_fraction for a in result.alternatives
    )


def test_infeasible_request_says_which_limit_binds() -> None:
    req = _request(
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
        constraints={"memory_cap_gib": 10, "recompute": ["none"]},
    )
    with pytest.raises(InfeasibleError) as info:
        search(req)
    d = info.value.diagnosis
    assert d["binding"] == "memory"
    assert d["lowest_peak_gib"] > d["cap_gib"] == 10
    assert d["over_by_gib"] == pytest.approx(d["lowest_peak_gib"] - 10)
    assert any("full recompute" in tip for tip in d["suggestions"])
    assert "infeasible" in str(info.value)


def test_exhaustive_refuses_a_large_space() -> None:
    req = _request(
        constraints={"memory_cap_gib": 76, "pp": [8], "tp": [1]},
        search={"mode": "exhaustive"},
    )
    with pytest.raises(SpecError) as info:
        search(req)
    assert info.value.field == "search.mode"


def test_search_statistics_count_the_space() -> None:
    req = _request(
        model={**GPT_13B, "num_layers": 14, "hidden_size": 4096, "num_attention_heads": 32},
        constraints={"memory_cap_gib": 40, "pp": [8], "tp": [1], "cp": [1], "zero_stages": [1]},
        search={"time_limit_s": 60, "top_k": 5},
    )
    result = search(req)
    s = result.search
    assert s.status == "OPTIMAL"
    assert s.candidates_considered >= s.candidates_pruned
    assert s.solver_calls >= 1

    # an alternative differs in degrees (cp, ep, etp among them), schedule, vpp, micro-batch
    # size or ZeRO
    def key(p: Plan) -> tuple[object, ...]:
        degrees = (p.tp, p.cp, p.pp, p.dp, p.ep, p.etp)
        return (*degrees, p.vpp, p.schedule, p.micro_batch_size, p.zero_stage)

    keys = {key(a) for a in result.alternatives}
    assert key(result.plan) not in keys
    assert len(keys) == len(result.alternatives)
    assert all(
        a.prediction.step_time_s >= result.plan.prediction.step_time_s * (1 - 1e-9)
        for a in result.alternatives
    )


def test_why_names_a_faster_group_that_memory_pruned() -> None:
    """A group dropped by its memory floor (no configuration of it built) is named by its
    degrees, 'any schedule', and how far its floor exceeds the cap; the diagnosis builds a
    representative of it."""
    req = _request(
        model={**GPT_13B, "num_layers": 14, "hidden_size": 4096, "num_attention_heads": 32},
        constraints={"memory_cap_gib": 40, "pp": [8], "tp": [1], "zero_stages": [1]},
        search={"time_limit_s": 30},
    )
    out = run_search(req)
    assert out.best is not None
    entry, best = out.best
    cfg = next(c for c in enumerate_configs(req, num_layers=16) if c.pp == 8 and c.tp == 1)
    over = float(req.memory_cap_bytes) + 3 * 1024**3
    out.memory_groups.append(MemoryGroup([cfg], over, 0.5 * best.score.step_time_s))
    lines = [line for line in why(req, out, entry, best) if line.startswith("Memory binds")]
    assert len(lines) == 1
    assert f"tp=1 x pp=8 x dp={cfg.dp} (any schedule)" in lines[0]
    assert "exceeds the cap by at least 3.0 GiB" in lines[0]
    rep = memory_rep(req, out, out.memory_groups[-1])
    assert rep is not None and rep.config == cfg and rep.memory_floor_bytes == over


def test_a_zero_bubble_provisional_plan_prunes_the_sweep_of_pp_1_groups() -> None:
    # Objective bubble with pp = 1 allowed: every pp = 1 plan has zero bubble, so the fastest
    # of them wins. The sweep's first pp = 1 plan bounds the other pp = 1 groups by its step
    # time (driver._sweep_bound_s), so some are settled by their floors without their
    # PartitionInputs being built; the plan stays the exhaustive search's.
    doc = {
        "model": {**GPT_13B, "num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16},
        "constraints": {
            "memory_cap_gib": 76,
            "pp": [1, 2],
            "zero_stages": [1],
            "schedules": ["1f1b"],
            "recompute": ["none", "full"],
        },
        "objective": "bubble",
    }
    req = _request(**doc, search={"time_limit_s": 60})
    out = run_search(req)
    assert out.best is not None and out.source is not None
    layers = len(out.source.layers)
    pp1 = [c for c in enumerate_configs(req, num_layers=layers) if c.pp == 1]
    built = [e for e in out.entries if e.config.pp == 1]
    assert 0 < len(built) < len(pp1)
    exhaustive = search(_request(**doc, search={"time_limit_s": 60, "mode": "exhaustive"}))
    plan = out.best[0].config
    assert exhaustive.plan.pp == 1
    assert (plan.tp, plan.dp, plan.micro_batch_size) == (
        exhaustive.plan.tp,
        exhaustive.plan.dp,
        exhaustive.plan.micro_batch_size,
    )
    assert out.best[1].score.step_time_s == pytest.approx(
        exhaustive.plan.prediction.step_time_s, rel=1e-9
    )
