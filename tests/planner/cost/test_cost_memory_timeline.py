"""Per-rank memory of evaluate: the timeline peak for ranks with several chunks, and the
transients (recompute, loss temporary) and fragmentation reserve as stated breakdown terms."""

from __future__ import annotations

import pytest

from planner.cost import (
    build_inputs,
    evaluate,
    prediction_from_score,
    resolve_costs,
    score_partition,
)
from planner.cost.memory import MemoryTerms
from planner.plan import Prediction
from planner.specs import Candidate, PlanRequest

S, B, V, H = 1024, 2, 51200, 2048


def gpt_request(num_gpus: int, batch: int) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": {
                "family": "gpt",
                "num_layers": 8,
                "hidden_size": H,
                "num_attention_heads": 16,
                "vocab_size": V,
            },
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": num_gpus},
            "training": {"global_batch_size": batch, "seq_length": S},
        }
    )


def test_interleaved_rank_is_charged_its_timeline_peak_not_the_sum() -> None:
    # pp = 2, vpp = 2, m = 8. Rank 0's order (torch's Interleaved1F1B) starts
    # 0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 ...: stage 0 peaks at 4 held, stage 2 at 2, but rank 0
    # holds (3 of stage 0, 2 of stage 2) or (4, 1) at most -- never (4, 2).
    req = gpt_request(num_gpus=2, batch=8 * B)
    cand = Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=B)
    pred = evaluate(req, cand)
    st = pred.stages
    assert [s.peak_inflight for s in st] == [4, 3, 2, 1]
    a0, a2 = st[0].activation_bytes / 4, st[2].activation_bytes / 2  # one micro-batch
    rank0 = pred.ranks[0].memory
    assert rank0.activations_bytes == pytest.approx(max(3 * a0 + 2 * a2, 4 * a0 + a2))
    assert rank0.activations_bytes < st[0].activation_bytes + st[2].activation_bytes
    for r in pred.ranks:
        assert r.memory.total_bytes == pytest.approx(r.total_bytes)


def test_one_chunk_per_rank_is_its_stage_peak() -> None:
    req = gpt_request(num_gpus=4, batch=8 * B)
    pred = evaluate(req, Candidate(pp=4, schedule="1f1b", micro_batch_size=B))
    for r in pred.ranks:
        (s,) = r.stages
        assert r.memory.activations_bytes == pytest.approx(pred.stages[s].activation_bytes)


def test_loss_temporary_is_one_fp32_logits_tensor_on_the_last_rank() -> None:
    req = gpt_request(num_gpus=4, batch=8 * B)
    for tp in (1, 2):
        cand = Candidate(tp=tp, pp=2, dp=2 // tp, schedule="1f1b", micro_batch_size=B)
        pred = evaluate(req, cand)
        last = pred.ranks[-1].memory
        # 4 bytes x s x b x V / t (Korthikanti 2022 §4.3: the fp32 logits)
        assert last.transient_bytes == pytest.approx(4.0 * S * B * V / tp)
        assert all(r.memory.transient_bytes == 0.0 for r in pred.ranks[:-1])
        off = evaluate_with(req, cand, MemoryTerms(loss_temporary=False))
        assert off.ranks[-1].memory.transient_bytes == 0.0
        assert pred.ranks[-1].total_bytes - off.ranks[-1].total_bytes == pytest.approx(
            4.0 * S * B * V / tp
        )


def evaluate_with(req: PlanRequest, cand: Candidate, terms: MemoryTerms) -> Prediction:
    """evaluate(req, cand) under other MemoryTerms."""
    inputs, t = build_inputs(req, cand, memory_terms=terms)
    assert t.candidate.stages is not None
    return prediction_from_score(req, inputs, t, score_partition(inputs, t.candidate.stages))


def test_recompute_transient_is_one_layers_rematerialised_activations() -> None:
    req = gpt_request(num_gpus=2, batch=8 * B)
    cand = Candidate(pp=2, schedule="1f1b", micro_batch_size=B, recompute="full")
    pred = evaluate(req, cand)
    src = resolve_costs(req)
    block = src.layer_costs(micro_batch_size=B, tp=1, sequence_parallel=False)[1]
    # the checkpoint keeps the block input (act.full); its backward recomputes the rest
    expected = block.activation_bytes.none - block.activation_bytes.full
    assert pred.ranks[0].memory.transient_bytes == pytest.approx(expected)
    # the last rank: the larger of its blocks' transient and the loss temporary
    loss = 4.0 * S * B * V
    assert pred.ranks[1].memory.transient_bytes == pytest.approx(max(expected, loss))
    off = evaluate_with(req, cand, MemoryTerms(recompute_transient=False, loss_temporary=False))
    assert off.ranks[0].memory.transient_bytes == 0.0
    none = evaluate(req, cand.model_copy(update={"recompute": "none"}))
    assert none.ranks[0].memory.transient_bytes == 0.0


def test_fragmentation_reserve_scales_the_dynamic_bytes() -> None:
    req = gpt_request(num_gpus=2, batch=8 * B)
    cand = Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=B)
    base = evaluate(req, cand)
    frag = evaluate_with(req, cand, MemoryTerms(fragmentation_fraction=0.1))
    for r0, r1 in zip(base.ranks, frag.ranks, strict=True):
        dynamic = r0.memory.activations_bytes + r0.memory.transient_bytes
        assert r1.memory.fragmentation_bytes == pytest.approx(0.1 * dynamic)
        assert r1.total_bytes == pytest.approx(r0.total_bytes + 0.1 * dynamic)
    with pytest.raises(ValueError, match=r"fragmentation_fraction=1\.5"):
        MemoryTerms(fragmentation_fraction=1.5)
