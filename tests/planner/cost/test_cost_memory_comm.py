"""ZeRO memory formulas, collective formulas and link placement."""

from __future__ import annotations

import pytest

from planner.cost.comm import all_gather_s, all_reduce_s, dp_link, p2p_s, pp_link, tp_link
from planner.cost.memory import dp_sync_s, optimizer_step_bytes, static_bytes
from planner.specs import ClusterSpec, TrainingSpec

PSI = 1e9
BF16_ADAM = TrainingSpec(global_batch_size=8, seq_length=128)


@pytest.mark.parametrize(
    ("stage", "expected_per_psi"),
    # ZeRO paper (Rajbhandari et al. 2020), Table 1 with K = 12, d = 8
    [(0, 16.0), (1, 4 + 12 / 8), (2, 2 + 14 / 8), (3, 16 / 8)],
)
def test_zero_static_bytes(stage: int, expected_per_psi: float) -> None:
    sb = static_bytes(PSI, training=BF16_ADAM, zero_stage=stage, dp=8)
    assert sb.total_bytes == pytest.approx(expected_per_psi * PSI)


def test_sgd_and_fp32_optimizer_bytes() -> None:
    sgd = TrainingSpec(global_batch_size=8, seq_length=128, optimizer="sgd")
    assert static_bytes(PSI, training=sgd, zero_stage=0, dp=1).total_bytes == 12 * PSI
    fp32 = TrainingSpec(global_batch_size=8, seq_length=128, dtype="fp32")
    # fp32 weights 4 + grads 4 + Adam moments 8 (no separate master copy)
    assert static_bytes(PSI, training=fp32, zero_stage=0, dp=1).total_bytes == 16 * PSI


def test_optimizer_step_bytes() -> None:
    # read fp32 master, m, v and the bf16 gradient; write master, m, v and the bf16 weight
    assert optimizer_step_bytes(PSI, training=BF16_ADAM, zero_stage=0, dp=4) == 28 * PSI
    assert optimizer_step_bytes(PSI, training=BF16_ADAM, zero_stage=1, dp=4) == 7 * PSI


CLUSTER = ClusterSpec(gpu="A100-SXM-80GB", num_gpus=64, gpus_per_node=8)


def test_links_follow_megatron_rank_order() -> None:
    nvlink_bus = 300e9  # half of A100's 600 GB/s bidirectional NVLink
    assert tp_link(CLUSTER, tp=8).bytes_per_s == nvlink_bus
    assert tp_link(CLUSTER, tp=4).name == "intra-node"
    # tp=8 fills a node: dp neighbours one per node, one 25 GB/s HCA each
    assert dp_link(CLUSTER, tp=8, dp=8).bytes_per_s == 25e9
    # tp=2, dp=32: 4 members per node -> 4 rings over 4 HCAs
    assert dp_link(CLUSTER, tp=2, dp=32).bytes_per_s == 100e9
    # tp=1, dp=64: 8 per node, 200 GB/s < NVLink bus bandwidth
    assert dp_link(CLUSTER, tp=1, dp=64).bytes_per_s == 200e9
    # a DP group inside one node runs on NVLink
    assert dp_link(CLUSTER, tp=2, dp=4).name == "intra-node"
    assert pp_link(CLUSTER, tp=8, dp=1, pp=8).name == "inter-node"
    # a 16-wide TP group (when allowed) spans two nodes with 8 rings over 8 NICs
    assert tp_link(CLUSTER, tp=16).bytes_per_s == 200e9
    assert tp_link(CLUSTER, tp=16).name == "inter-node"
    one_node = ClusterSpec(gpu="A100-SXM-80GB", num_gpus=8)
    assert pp_link(one_node, tp=1, dp=2, pp=4).name == "intra-node"


def test_override_links() -> None:
    c = ClusterSpec(gpu="H100-SXM-80GB", num_gpus=16, intra_node_gbps=400, inter_node_gbps=10)
    assert tp_link(c, tp=8).bytes_per_s == 200e9
    assert dp_link(c, tp=8, dp=2).bytes_per_s == 10e9


def test_ring_formulas() -> None:
    link = tp_link(CLUSTER, tp=8)
    size = 100e6
    # NCCL doc/PERFORMANCE.md: all-reduce moves 2(n-1)/n S per rank, all-gather (n-1)/n S
    assert all_reduce_s(size, group=8, link=link) == pytest.approx(
        2 * 7 / 8 * size / 300e9 + CLUSTER.intra_node_latency_s
    )
    assert all_gather_s(size, group=8, link=link) == pytest.approx(
        7 / 8 * size / 300e9 + CLUSTER.intra_node_latency_s
    )
    assert all_reduce_s(size, group=1, link=link) == 0
    assert p2p_s(size, link=link) == pytest.approx(size / 300e9 + CLUSTER.intra_node_latency_s)


def test_dp_sync_zero_stages() -> None:
    link = dp_link(CLUSTER, tp=8, dp=8)

    def sync(zero: int, dp: int = 8, m: int = 1) -> float:
        return dp_sync_s(PSI, training=BF16_ADAM, zero_stage=zero, dp=dp, link=link, microbatches=m)

    z0 = sync(0)
    assert z0 == pytest.approx(2 * 7 / 8 * 2 * PSI / 25e9)
    assert sync(1) == pytest.approx(z0)
    assert sync(3) == pytest.approx(1.5 * z0)
    assert sync(0, dp=1) == 0


def test_zero_2_and_3_pay_their_traffic_per_micro_batch() -> None:
    # 8 micro-batches: ZeRO-0/1 accumulate locally and all-reduce once; ZeRO-2 reduce-scatters
    # each micro-batch (8 x half an all-reduce) and all-gathers once (half); ZeRO-3 gathers
    # twice and reduce-scatters once per micro-batch (8 x 1.5)
    link = dp_link(CLUSTER, tp=8, dp=8)
    one = 2 * 7 / 8 * 2 * PSI / 25e9

    def sync(zero: int) -> float:
        return dp_sync_s(PSI, training=BF16_ADAM, zero_stage=zero, dp=8, link=link, microbatches=8)

    assert sync(0) == pytest.approx(one) and sync(1) == pytest.approx(one)
    assert sync(2) == pytest.approx(4.5 * one)
    assert sync(3) == pytest.approx(12 * one)
