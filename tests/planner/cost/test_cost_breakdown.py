"""bench/cost_breakdown.py: the rows add up to the predicted step, and they move the way the
model says they should between two configurations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.cost_breakdown import breakdown
from planner.catalog.layer_work import GEMM_KINDS
from planner.cost import evaluate
from planner.specs import Candidate, PlanRequest

REPO = Path(__file__).resolve().parents[3]
GPT: dict[str, Any] = {
    "model": {
        "family": "gpt",
        "name": "gpt-13b",
        "num_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "vocab_size": 51200,
    },
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 32},
    "training": {"global_batch_size": 128, "seq_length": 2048},
}
LLAMA: dict[str, Any] = {
    "model": {
        "family": "llama",
        "name": "llama-8b",
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "ffn_hidden_size": 14336,
        "vocab_size": 128256,
    },
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 32},
    "training": {"global_batch_size": 64, "seq_length": 8192},
}
CANDIDATE: dict[str, Any] = {
    "tp": 4,
    "pp": 4,
    "dp": 2,
    "vpp": 2,
    "schedule": "interleaved-1f1b",
    "micro_batch_size": 1,
    "recompute": "full",
}


def test_the_script_runs_and_its_rows_sum_to_evaluates_step_time(tmp_path: Path) -> None:
    r, c = tmp_path / "r.json", tmp_path / "c.json"
    r.write_text(json.dumps(GPT))
    c.write_text(json.dumps(CANDIDATE))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    script = str(REPO / "bench" / "cost_breakdown.py")
    run = subprocess.run(
        [sys.executable, script, str(r), str(c), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out = json.loads(run.stdout)
    step = evaluate(PlanRequest.model_validate(GPT), Candidate.model_validate(CANDIDATE))
    assert out["step_time_s"] == pytest.approx(step.step_time_s, rel=1e-12)
    assert out["sum_of_rows_s"] == pytest.approx(step.step_time_s, rel=1e-9)
    rows = out["rows_s"]
    assert set(GEMM_KINDS) <= set(rows)
    assert {"attention", "elementwise", "TP, CP and EP exchanges", "bubble and waits"} <= set(rows)
    assert all(v >= 0 for v in rows.values()), rows
    # with 4-way tp on NVLink the GEMMs dominate the step
    assert sum(rows[k] for k in GEMM_KINDS) > 0.5 * step.step_time_s
    text = subprocess.run(
        [sys.executable, script, str(r), str(c)], capture_output=True, text=True, env=env
    )
    assert text.returncode == 0 and "gemm.qkv" in text.stdout


def test_llama_flash_attention_and_no_selective_part() -> None:
    cand = Candidate.model_validate(dict(CANDIDATE, recompute="selective"))
    out = breakdown(PlanRequest.model_validate(LLAMA), cand)
    assert out["sum_of_rows_s"] == pytest.approx(out["step_time_s"], rel=1e-9)
    assert out["rows_s"]["attention"] > 0


def test_a_larger_micro_batch_trades_gemm_time_for_bubble() -> None:
    req = PlanRequest.model_validate(GPT)
    one = breakdown(req, Candidate.model_validate(CANDIDATE))
    four = breakdown(req, Candidate.model_validate(dict(CANDIDATE, micro_batch_size=4)))
    assert four["rows_s"]["bubble and waits"] > one["rows_s"]["bubble and waits"]
    assert four["rows_s"]["gemm.qkv"] < one["rows_s"]["gemm.qkv"]


@pytest.mark.parametrize("framework", [None, "torchtitan"])
def test_context_parallel_rows_sum_to_the_step(framework: str | None) -> None:
    """cp > 1: the parts are priced at the candidate's cp (s/cp tokens, ring steps) and with
    the framework's ring, so they still add up to the step."""
    doc = dict(LLAMA, cluster={"gpu": "H100-SXM-80GB", "num_gpus": 8})
    doc["training"] = {"global_batch_size": 2, "seq_length": 131072}
    doc["constraints"] = {"framework": framework}
    cand = Candidate(cp=4, cp_comm="all_gather", dp=2, zero_stage=3, recompute="full")
    out = breakdown(PlanRequest.model_validate(doc), cand)
    assert out["sum_of_rows_s"] == pytest.approx(out["step_time_s"], rel=1e-9)
    # at 128K the attention core is the largest compute part
    rows = out["rows_s"]
    assert rows["attention"] > max(rows[k] for k in GEMM_KINDS)


def test_expert_layers_have_their_own_parts() -> None:
    """An MoE model's decoder kind is decoder_moe: its expert GEMMs are named, and the
    all-to-alls sit in the exchanges row, so the rows still sum to the step."""
    doc = dict(LLAMA, cluster={"gpu": "H100-SXM-80GB", "num_gpus": 16})
    doc["model"] = dict(
        LLAMA["model"],
        name="moe-8x",
        num_layers=8,
        moe={"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 14336},
    )
    cand = Candidate(tp=1, ep=8, pp=2, dp=8, micro_batch_size=1, recompute="full")
    out = breakdown(PlanRequest.model_validate(doc), cand)
    assert out["sum_of_rows_s"] == pytest.approx(out["step_time_s"], rel=1e-9)
    rows = out["rows_s"]
    assert rows["gemm.expert_in"] > rows["gemm.qkv"]
    assert rows["TP, CP and EP exchanges"] > 0
