"""evaluate / score_partition / partition_inputs: consistency, published formulas, memory."""

from __future__ import annotations

import pytest

from planner.catalog.efficiency import DEFAULT_EFFICIENCY
from planner.catalog.models import analytic_profile
from planner.cost import (
    build_inputs,
    evaluate,
    partition_inputs,
    resolve_costs,
    score_partition,
)
from planner.errors import SpecError
from planner.specs import Candidate, PlanRequest, StageSpec

GIB = 1024**3
L, H, A, V, S = 8, 2048, 16, 51200, 1024


def gpt_request(num_gpus: int = 16, batch: int = 64, **extra: object) -> PlanRequest:
    doc: dict[str, object] = {
        "model": {
            "family": "gpt",
            "num_layers": L,
            "hidden_size": H,
            "num_attention_heads": A,
            "vocab_size": V,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": num_gpus},
        "training": {"global_batch_size": batch, "seq_length": S},
    }
    doc.update(extra)
    return PlanRequest.model_validate(doc)


def test_prediction_is_internally_consistent() -> None:
    req = gpt_request()
    cand = Candidate(tp=2, pp=4, dp=2, vpp=1, schedule="1f1b", micro_batch_size=2, recompute="full")
    p = evaluate(req, cand)
    assert p.step_time_s == pytest.approx(p.pipeline_s + p.dp_sync_s + p.optimizer_s)
    assert p.tokens_per_s == pytest.approx(64 * S / p.step_time_s)
    assert len(p.stages) == 4 and len(p.ranks) == 4
    for r in p.ranks:
        assert r.memory.total_bytes == pytest.approx(r.total_bytes)
    assert p.peak_memory_bytes == pytest.approx(max(r.total_bytes for r in p.ranks))
    assert p.margin_bytes == pytest.approx(80 * GIB - p.peak_memory_bytes)
    assert p.feasible
    assert 0 < p.bubble_fraction < 1
    # 1F1B holds min(pp - s, m) micro-batches on stage s (Narayanan 2021 §2.2.1); m = 16
    assert [s.peak_inflight for s in p.stages] == [4, 3, 2, 1]


def test_flops_match_narayanan_eq3_and_korthikanti_eq7() -> None:
    req = gpt_request()
    p = evaluate(req, Candidate(tp=2, pp=2, dp=4, micro_batch_size=1, recompute="full"))
    B = 64
    eq7 = 72 * B * L * S * H * H * (1 + S / (6 * H) + V / (12 * H * L))
    eq3 = 96 * B * S * L * H * H * (1 + S / (6 * H) + V / (16 * L * H))
    assert p.model_tflops_per_gpu * 1e12 * 16 * p.step_time_s == pytest.approx(eq7, rel=1e-9)
    assert p.hardware_tflops_per_gpu * 1e12 * 16 * p.step_time_s == pytest.approx(eq3, rel=1e-9)
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu / 312)
    # without recompute both counts agree
    q = evaluate(req, Candidate(tp=2, pp=2, dp=4, micro_batch_size=1, recompute="none"))
    assert q.hardware_tflops_per_gpu == pytest.approx(q.model_tflops_per_gpu)
    assert q.step_time_s < p.step_time_s


def test_single_stage_step_is_m_times_fw_plus_bw_plus_post() -> None:
    # pp = 1: no pipeline, plain gradient accumulation -- computed here from the inputs alone
    req = gpt_request()
    cand = Candidate(tp=2, pp=1, dp=8, micro_batch_size=2, recompute="selective")
    inputs, terms = build_inputs(req, cand)
    assert terms.candidate.stages is not None
    modes = terms.candidate.stages[0].recompute
    assert modes is not None
    idx = {"none": 0, "selective": 1, "full": 2}
    per_mb = sum(
        inputs.fw_s[i] + inputs.bw_input_s[i][idx[m]] + inputs.bw_weight_s[i]
        for i, m in enumerate(modes)
    )
    m = 64 // (8 * 2)
    expected = m * per_mb + sum(inputs.post_s)
    assert evaluate(req, cand).step_time_s == pytest.approx(expected, rel=1e-12)


def test_score_partition_is_what_evaluate_reports() -> None:
    req = gpt_request()
    cand = Candidate(tp=1, pp=4, dp=4, vpp=2, schedule="interleaved-1f1b", recompute="none")
    inputs = partition_inputs(req, cand)
    stages = (
        StageSpec(layers=(0, 2)),
        StageSpec(layers=(2, 3)),
        StageSpec(layers=(3, 4)),
        StageSpec(layers=(4, 5)),
        StageSpec(layers=(5, 6)),
        StageSpec(layers=(6, 7)),
        StageSpec(layers=(7, 8)),
        StageSpec(layers=(8, 10)),
    )
    score = score_partition(inputs, stages)
    pred = evaluate(req, cand.model_copy(update={"stages": stages}))
    assert pred.step_time_s == score.step_time_s
    assert pred.peak_memory_bytes == score.peak_memory_bytes
    assert pred.bubble_fraction == score.bubble_fraction
    with pytest.raises(SpecError):
        score_partition(inputs, stages[:-1])


def test_tp_collectives_cost_time_and_full_recompute_repeats_them() -> None:
    req = gpt_request()
    x8 = partition_inputs(req, Candidate(tp=8, pp=1, dp=2))
    raw = resolve_costs(req).layer_costs(micro_batch_size=1, tp=8, sequence_parallel=False)
    d = 1  # a decoder layer
    # 2 all-reduces of b*s*h bf16 each way on NVLink (300 GB/s bus at the calibrated share
    # NCCL achieves), ring 2(t-1)/t, + latency
    bus = 300e9 * DEFAULT_EFFICIENCY.link_fraction
    one_way = 2 * (2 * 7 / 8 * S * H * 2 / bus + 5e-6)
    assert x8.fw_s[d] - raw[d].fw_s == pytest.approx(one_way, rel=1e-9)
    none, _, full = x8.bw_input_s[d]
    assert none - raw[d].bw_input_s == pytest.approx(one_way, rel=1e-9)
    # full recompute re-runs the forward, collectives included
    assert full - none == pytest.approx(x8.fw_s[d], rel=1e-9)
    x1 = partition_inputs(req, Candidate(tp=1, pp=1, dp=16))
    assert (
        x1.fw_s[d]
        == resolve_costs(req).layer_costs(micro_batch_size=1, tp=1, sequence_parallel=False)[d].fw_s
    )


def test_tied_embedding_copy_counted_only_across_ranks() -> None:
    req = gpt_request()
    one = partition_inputs(req, Candidate(tp=2, pp=1, dp=8))
    two = partition_inputs(req, Candidate(tp=2, pp=2, dp=4))
    word = V * H / 2
    assert two.static_bytes[-1] - one.static_bytes[-1] == pytest.approx(16 * word)
    assert two.post_s[0] > 0  # embedding-gradient all-reduce between first and last rank


def test_activation_memory_is_inflight_times_stage_bytes() -> None:
    req = gpt_request()
    cand = Candidate(tp=1, pp=2, dp=8, schedule="gpipe", recompute="none")
    p = evaluate(req, cand)
    inputs = partition_inputs(req, cand)
    m = 64 // 8
    stage0 = sum(a[0] for a in inputs.activation_bytes[0:5])
    assert p.stages[0].peak_inflight == m  # GPipe holds every micro-batch
    assert p.ranks[0].memory.activations_bytes == pytest.approx(m * stage0)


def test_inline_profile_gives_the_same_prediction_as_the_arch() -> None:
    arch_req = gpt_request()
    assert arch_req.arch is not None
    profile = analytic_profile(arch_req.arch, arch_req.cluster, arch_req.training, [(2, 2, True)])
    prof_req = gpt_request(model={"profile": profile.model_dump(mode="json")})
    src = resolve_costs(prof_req)
    assert src.origin == "profile"
    assert len(src.layers) == L + 2
    cand = Candidate(tp=2, pp=2, dp=4, micro_batch_size=2, sequence_parallel=True)
    a = evaluate(arch_req, cand)
    b = evaluate(prof_req, cand)
    assert b.step_time_s == pytest.approx(a.step_time_s, rel=1e-12)
    assert b.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-12)


def test_zero_shards_static_memory() -> None:
    req = gpt_request()
    z0 = evaluate(req, Candidate(tp=1, pp=1, dp=16, zero_stage=0))
    z3 = evaluate(req, Candidate(tp=1, pp=1, dp=16, zero_stage=3))
    m0, m3 = z0.ranks[0].memory, z3.ranks[0].memory
    static0 = m0.params_bytes + m0.grads_bytes + m0.optimizer_bytes
    static3 = m3.params_bytes + m3.grads_bytes + m3.optimizer_bytes
    assert static3 == pytest.approx(static0 / 16)
    # ZeRO-3 gathers the parameters twice and reduce-scatters the gradients per micro-batch
    m = req.training.global_batch_size // 16
    assert z3.dp_sync_s == pytest.approx(1.5 * m * z0.dp_sync_s)


def test_memory_cap_and_reserve_from_request() -> None:
    req = gpt_request(constraints={"memory_cap_gib": 8, "memory_reserve_gib": 2})
    p = evaluate(req, Candidate(tp=1, pp=1, dp=16))
    assert p.memory_cap_bytes == 8 * GIB
    assert p.ranks[0].memory.reserve_bytes == 2 * GIB
    assert not p.feasible
    assert p.margin_bytes < 0


def test_llama_gqa_on_h100() -> None:
    req = PlanRequest.model_validate(
        {
            "model": {
                "family": "llama",
                "num_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_kv_heads": 8,
                "ffn_hidden_size": 14336,
                "vocab_size": 128256,
            },
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16},
            "training": {"global_batch_size": 128, "seq_length": 8192},
        }
    )
    cand = Candidate(
        tp=8, pp=2, dp=1, schedule="zbv", vpp=2, sequence_parallel=True, recompute="selective"
    )
    inputs = partition_inputs(req, cand)
    assert len(inputs.fw_s) == len(inputs.static_bytes) == 34
    assert inputs.stage_rank == (0, 1, 1, 0)
    p = evaluate(req, cand)
    assert p.feasible
    # untied: embedding and head each keep their own V*h/t weights, both on rank 0 under zbv
    assert p.ranks[0].memory.params_bytes > p.ranks[1].memory.params_bytes
    # llama's fused attention: selective recompute saves nothing and costs nothing
    assert p.hardware_tflops_per_gpu == pytest.approx(p.model_tflops_per_gpu)
    assert 0.2 < p.mfu < 0.7
    with pytest.raises(SpecError) as info:
        evaluate(req, Candidate(tp=16, pp=1, dp=1))
    assert info.value.field == "candidate.tp"
