"""The attention core's kernel (`ModelArch.attention_kernel`): gpt's default unfused core,
the fused flash kernel on request, and context parallelism only with the fused one."""

from __future__ import annotations

from typing import Any

import pytest

from planner.cost import evaluate
from planner.errors import SpecError
from planner.specs import Candidate, PlanRequest

GPT: dict[str, Any] = {
    "family": "gpt",
    "name": "gpt-1.3b",
    "num_layers": 4,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "vocab_size": 51200,
}


def _request(**model: Any) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": {**GPT, **model},
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2},
            "training": {"global_batch_size": 8, "seq_length": 4096},
        }
    )


def test_cp_on_an_unfused_core_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError) as err:
        evaluate(_request(), Candidate(cp=2))
    assert err.value.field == "candidate.cp"
    assert "attention_kernel" in str(err.value)


def test_the_fused_core_saves_the_scores_and_runs_context_parallel() -> None:
    unfused = evaluate(_request(), Candidate(dp=2))
    flash = evaluate(_request(attention_kernel="flash"), Candidate(dp=2))
    # the unfused core saves a x s^2 x b scores (2d + 1 bytes each, Korthikanti 2022 §4.1):
    # 16 x 4096^2 x 5 = 1.34 GB a layer; the flash kernel saves only its fp32 log-sum-exp
    saved = 4 * 16 * 4096**2 * 5 - 4 * 4 * 4096 * 16
    gap = unfused.peak_memory_bytes - flash.peak_memory_bytes
    assert gap == pytest.approx(saved, rel=0.05)
    assert flash.step_time_s < unfused.step_time_s  # no s^2 softmax and dropout over HBM
    cp = evaluate(_request(attention_kernel="flash"), Candidate(cp=2))
    assert cp.feasible and cp.peak_memory_bytes < flash.peak_memory_bytes


def test_llama_has_no_unfused_core() -> None:
    with pytest.raises(ValueError, match="attention_kernel='unfused'"):
        PlanRequest.model_validate(
            {
                "model": {
                    **GPT,
                    "family": "llama",
                    "ffn_hidden_size": 5504,
                    "attention_kernel": "unfused",
                },
                "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2},
                "training": {"global_batch_size": 8, "seq_length": 4096},
            }
        )
