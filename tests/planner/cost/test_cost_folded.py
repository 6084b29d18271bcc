"""Context- and expert-parallel costs: the communication formulas by hand, the folded
gradient groups, and the direction each degree moves a prediction."""

from __future__ import annotations

import math

import pytest

from planner.catalog.models import PRESETS, analytic_profile
from planner.catalog.moe_work import RoutingTerms
from planner.cost import build_inputs, check_candidate, evaluate, fixed_plan, resolve_costs
from planner.cost.folded import cp_times, ep_time, folded_links
from planner.errors import SpecError
from planner.specs import Candidate, ClusterSpec, ModelArch, PlanRequest, TrainingSpec
from planner.specs.base import ModeValues
from planner.specs.model import LayerCost
from planner.specs.request import ProfileRef

H100_NVLINK = 900e9 / 2  # bus bandwidth per direction (planner.cost.comm.intra_link)
H100_NIC = 50e9
INTRA_LAT, INTER_LAT = 5e-6, 1e-5

LLAMA = ModelArch(
    family="llama",
    num_layers=4,
    hidden_size=1024,
    num_attention_heads=16,
    num_kv_heads=4,
    ffn_hidden_size=4096,
    vocab_size=32000,
)
MOE = ModelArch(
    family="llama",
    num_layers=4,
    hidden_size=1024,
    num_attention_heads=16,
    num_kv_heads=4,
    ffn_hidden_size=4096,
    vocab_size=32000,
    moe={"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 1024},
)


def _request(
    arch: ModelArch, *, gpus: int = 8, per_node: int = 8, gbs: int = 8, seq: int = 4096
) -> PlanRequest:
    return PlanRequest(
        model=arch,
        cluster=ClusterSpec(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=per_node),
        training=TrainingSpec(global_batch_size=gbs, seq_length=seq, dtype="bf16"),
    )


def _cost(**fields: float) -> LayerCost:
    zero = ModeValues(none=0.0, selective=0.0, full=0.0)
    return LayerCost(
        fw_s=1e-3,
        bw_input_s=1e-3,
        bw_weight_s=1e-3,
        recompute_s=zero,
        activation_bytes=zero,
        param_bytes=0.0,
        param_count=0.0,
        output_bytes=0.0,
        **fields,
    )


def test_the_p2p_ring_shows_only_what_a_step_does_not_hide() -> None:
    """cp = 4 inside a node (tp 2 x cp 4 = 8): each of the 3 steps sends S = 10 MB (20 MB in
    the backward) over NVLink while a quarter of the attention runs."""
    req = _request(LLAMA)
    links = folded_links(req.cluster, Candidate(tp=2, cp=4), achieved=1.0, experts=True)
    cost = _cost(cp_kv_bytes=1e7, attention_fw_s=4e-5, attention_bw_s=8e-5)
    fw, bw = cp_times(cost, links)
    assert math.isclose(fw, 3 * (1e7 / H100_NVLINK + INTRA_LAT - 1e-5))
    assert math.isclose(bw, 3 * (2e7 / H100_NVLINK + INTRA_LAT - 2e-5))
    # a small send hides under the compute completely
    assert cp_times(_cost(cp_kv_bytes=1e5, attention_fw_s=4e-4, attention_bw_s=8e-4), links) == (
        0.0,
        0.0,
    )
    # the all-gather: (cp - 1)/cp x cp S over the ring, then twice that backward
    gather = folded_links(
        req.cluster, Candidate(tp=2, cp=4, cp_comm="all_gather"), achieved=1.0, experts=True
    )
    fw, bw = cp_times(cost, gather)
    assert math.isclose(fw, 3 / 4 * 4e7 / H100_NVLINK + INTRA_LAT)
    assert math.isclose(bw, 2 * fw)


def test_a_ring_across_nodes_waits_on_the_nic() -> None:
    """tp 8 x cp 2 spans two nodes: the ring's sends cross on one NIC per GPU."""
    req = _request(LLAMA, gpus=16)
    links = folded_links(req.cluster, Candidate(tp=8, cp=2, dp=1), achieved=1.0, experts=True)
    fw, _ = cp_times(_cost(cp_kv_bytes=1e7), links)
    assert math.isclose(fw, 1e7 / H100_NIC + INTER_LAT)


def test_ep_across_nodes_costs_more_than_inside() -> None:
    """ep = 8 on one node of 8 vs two nodes of 4: dispatch and combine, each D (ep - 1)/ep
    over NVLink inside; across, half of D leaves over the NIC (k = 4 members a node)."""
    inside, across = _request(MOE), _request(MOE, per_node=4)
    c = Candidate(dp=8, ep=8)
    d = 1.25 * 4096 * 2 * 1024 * 2  # the busiest rank (default imbalance): T_r k h bf16
    li = folded_links(inside.cluster, c, achieved=1.0, experts=True)
    la = folded_links(across.cluster, c, achieved=1.0, experts=True)
    cost = _cost(ep_dispatch_bytes=d)
    assert math.isclose(ep_time(cost, li), 2 * (d * 7 / 8 / H100_NVLINK + INTRA_LAT))
    assert math.isclose(ep_time(cost, la), 2 * (d * 4 / 8 / H100_NIC + INTER_LAT))
    fw_in = build_inputs(inside, c)[0].fw_s
    fw_out = build_inputs(across, c)[0].fw_s
    assert all(b >= a for a, b in zip(fw_in, fw_out, strict=True))
    moe_layer = 2  # decoder.1
    extra = fw_out[moe_layer] - fw_in[moe_layer]
    assert math.isclose(extra, ep_time(cost, la) - ep_time(cost, li), rel_tol=1e-9)
    assert evaluate(across, c).step_time_s > evaluate(inside, c).step_time_s


def test_memory_falls_with_cp_and_the_work_per_step_is_the_same() -> None:
    req = _request(LLAMA, seq=16384)
    preds = {cp: evaluate(req, Candidate(cp=cp, dp=8 // cp, zero_stage=1)) for cp in (1, 2, 4)}
    peaks = [preds[cp].peak_memory_bytes for cp in (1, 2, 4)]
    assert peaks[0] > peaks[1] > peaks[2]
    # the step's model FLOPs (per GPU x GPUs x step) do not depend on how the tokens are split
    work = [p.model_tflops_per_gpu * p.step_time_s for p in preds.values()]
    assert all(math.isclose(w, work[0], rel_tol=1e-12) for w in work)


def test_cp_folds_into_the_gradient_group() -> None:
    """Dense gradients are reduced over dp x cp: dp 8 and dp 4 x cp 2 reduce the same bytes
    over a group of 8 inside the node; ZeRO-1 shards the optimizer over it too."""
    req = _request(LLAMA)
    _, one = build_inputs(req, Candidate(dp=8, zero_stage=1))
    _, two = build_inputs(req, Candidate(dp=4, cp=2, zero_stage=1))
    assert one.dp_sync_s == two.dp_sync_s
    assert [s.optimizer_bytes for s in one.static] == [s.optimizer_bytes for s in two.static]


def test_expert_state_is_sharded_over_ep_and_etp_and_reduced_over_edp() -> None:
    req = _request(MOE)
    base = build_inputs(req, Candidate(dp=8, zero_stage=1))[1]
    ep8 = build_inputs(req, Candidate(dp=8, ep=8, zero_stage=1))[1]
    ep4etp2 = build_inputs(req, Candidate(dp=8, ep=4, etp=2, zero_stage=1))[1]
    moe_layer = 1
    per_expert = 3 * 1024 * 1024
    dense = base.costs[moe_layer].param_count - 8 * per_expert
    assert math.isclose(ep8.costs[moe_layer].param_count, dense + per_expert)
    assert math.isclose(ep4etp2.costs[moe_layer].param_count, dense + per_expert)
    # ep 8 x edp 1: the experts' gradients need no reduction; base (edp 8) does
    assert ep8.dp_sync_s[moe_layer] < base.dp_sync_s[moe_layer]
    assert ep8.static[moe_layer].total_bytes < base.static[moe_layer].total_bytes
    assert (
        evaluate(req, Candidate(dp=8, ep=8)).peak_memory_bytes
        < evaluate(req, Candidate(dp=8)).peak_memory_bytes
    )


def test_the_candidate_is_checked_in_context() -> None:
    with pytest.raises(SpecError, match=r"seq_length=4004 must split into 2\*cp = 16"):
        check_candidate(_request(LLAMA, seq=4004), Candidate(cp=8, dp=1))
    with pytest.raises(SpecError, match="expert parallelism needs an analytic model with moe"):
        check_candidate(_request(LLAMA), Candidate(dp=8, ep=2))
    with pytest.raises(SpecError, match=r"must divide moe\.num_experts=8"):
        check_candidate(_request(MOE, gpus=6, gbs=6), Candidate(dp=6, ep=3))


def test_a_measured_profile_refuses_cp_and_ep() -> None:
    req = _request(LLAMA)
    profile = analytic_profile(LLAMA, req.cluster, req.training, [(1, 1, False)])
    src = resolve_costs(req.model_copy(update={"model": ProfileRef(profile=profile)}))
    with pytest.raises(SpecError, match="measured at cp = ep = etp = 1"):
        src.layer_costs(micro_batch_size=1, tp=1, sequence_parallel=False, cp=2)


def test_a_fixed_plan_carries_the_folded_degrees() -> None:
    req = _request(MOE)
    c = Candidate(dp=4, cp=2, cp_comm="all_gather", ep=4, etp=2)
    plan = fixed_plan(req, c)
    assert (plan.cp, plan.cp_comm, plan.ep, plan.etp) == (2, "all_gather", 4, 2)
    back = plan.candidate()
    assert (back.cp, back.cp_comm, back.ep, back.etp) == (2, "all_gather", 4, 2)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_evaluates_with_every_degree_folded(name: str) -> None:
    """tp 2 x cp 2 x dp 2 x pp 2 on 16 GPUs, the experts on ep 8 (edp 1) or ep 4 x etp 2."""
    req = _request(PRESETS[name], gpus=16, gbs=8)
    for ep, etp in ((8, 1), (4, 2)):
        c = Candidate(tp=2, cp=2, dp=2, pp=2, ep=ep, etp=etp, sequence_parallel=True, zero_stage=1)
        pred = evaluate(req, c)
        assert pred.step_time_s > 0 and 0 < pred.mfu < 1, (name, ep, etp)
        assert pred.peak_memory_bytes > 0


def test_a_source_with_more_imbalance_predicts_a_slower_moe_step() -> None:
    req = _request(MOE)
    c = Candidate(dp=8, ep=8)
    even = resolve_costs(req, routing=RoutingTerms(load_imbalance=1.0))
    skew = resolve_costs(req, routing=RoutingTerms(load_imbalance=2.0))
    assert evaluate(req, c, source=skew).step_time_s > evaluate(req, c, source=even).step_time_s
