"""The context-parallel ring's attention (planner.catalog.ring_attention and
planner.catalog.layer_work.ring_attention_s): FLOP conservation against one causal kernel, the
FlashAttention-2 tiles at short chunks, and torch's implementation (torchtitan) against
Megatron-Core's: K / V bytes from the model's heads, the fp32 partials, the overlap."""

from __future__ import annotations

import pytest

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import lookup_gpu
from planner.catalog.kernels import flash_attention_s
from planner.catalog.models import analytic_costs
from planner.catalog.ring_attention import (
    MEGATRON_CORE,
    TORCH_CONTEXT_PARALLEL,
    RingAttention,
    ring_attention_for,
)
from planner.cost import evaluate
from planner.cost.comm import all_gather_s, p2p_s
from planner.cost.folded import cp_times, folded_links
from planner.specs import Candidate, ClusterSpec, Constraints, ModelArch, PlanRequest, TrainingSpec
from planner.specs.model import LayerCost

H100 = lookup_gpu("H100")
assert H100 is not None
EFF = Efficiency()
# Llama 3.1 8B (model config): 32 query heads, 8 kv heads of 128
LLAMA8B = ModelArch(
    family="llama",
    name="llama3.1-8b",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    ffn_hidden_size=14336,
    vocab_size=128256,
)


def _decoder(seq: int, cp: int, ring: RingAttention = MEGATRON_CORE) -> LayerCost:
    return analytic_costs(
        LLAMA8B,
        gpu=H100,
        dtype="bf16",
        seq_length=seq,
        micro_batch_size=1,
        tp=1,
        sequence_parallel=False,
        cp=cp,
        ring=ring,
    )["decoder"]


def _attention_s(
    seq: int, cp: int, *, backward: bool, ring: RingAttention = MEGATRON_CORE
) -> float:
    cost = _decoder(seq, cp, ring)
    return cost.attention_bw_s if backward else cost.attention_fw_s


@pytest.mark.parametrize("backward", [False, True])
def test_long_chunks_do_one_cp_th_of_the_causal_core(backward: bool) -> None:
    # a rank's ring does s^2 / (2 cp) query-key pairs, 1/cp of the causal core's; at chunks
    # of whole tiles the cp kernels take 1/cp of the one kernel's time, up to each kernel's
    # own last wave (e.g. 4096 blocks on 132 SMs: 31.03 -> 32 waves, 3 %)
    seq = 131072
    whole = flash_attention_s(
        seq=seq,
        head_dim=128,
        batch_heads=32,
        causal=True,
        backward=backward,
        gpu=H100,
        eff=EFF,
        element_bytes=2,
    )
    for cp in (2, 4, 8):
        ring = _attention_s(seq, cp, backward=backward)
        assert whole / cp <= ring <= 1.05 * whole / cp


def test_a_partial_tile_costs_a_whole_one() -> None:
    # FlashAttention-2 (head size 128): forward blocks of 128 queries over keys 64 at a time,
    # backward blocks of 128 keys over queries 64 at a time. A fast-memory GPU keeps both
    # kernels compute-bound, so only the tiles count.
    gpu = H100.model_copy(update={"hbm_gbps": 1e9})
    common = dict(head_dim=128, batch_heads=4096, gpu=gpu, eff=EFF, element_bytes=2)

    def fw(q: int, k: int) -> float:
        return flash_attention_s(seq=k, queries=q, causal=False, backward=False, **common)  # type: ignore[arg-type]

    def bw(q: int, k: int) -> float:
        return flash_attention_s(seq=k, queries=q, causal=False, backward=True, **common)  # type: ignore[arg-type]

    assert fw(128, 32) == pytest.approx(fw(128, 64))  # 32 keys fill half a 64-key step
    assert fw(64, 64) == pytest.approx(fw(128, 64))  # 64 queries fill half a block
    assert fw(128, 128) == pytest.approx(2 * fw(128, 64) - EFF.kernel_overhead_s)
    assert bw(32, 128) == pytest.approx(bw(64, 128))
    assert bw(64, 64) == pytest.approx(bw(64, 128))


def test_short_chunks_cost_more_per_pair_than_long_ones() -> None:
    # Llama 3.1 8B at 4K: cp = 32 makes chunks of 64 tokens, a forward step's c-key kernels
    # half a 128-query block wide for the c-query kind; the time per query-key pair must
    # exceed the long-chunk rate (cp = 2 at 128K) by more than the launch costs alone
    def per_pair(seq: int, cp: int) -> float:
        return _attention_s(seq, cp, backward=False) / (seq * seq / (2 * cp))

    assert per_pair(4096, 32) > 1.5 * per_pair(131072, 2)


def test_torchtitan_runs_torchs_ring_and_others_megatrons() -> None:
    assert ring_attention_for("torchtitan") is TORCH_CONTEXT_PARALLEL
    for fw in ("megatron", "deepspeed", "meshplan", None):
        assert ring_attention_for(fw) is MEGATRON_CORE


def test_torch_ring_moves_every_query_heads_kv() -> None:
    # torchtitan repeats K, V to the 32 query heads before SDPA: 4x the 8 kv heads' bytes;
    # per rank 2 x (s / cp) tokens x heads x 128 x 2 bytes
    seq, cp = 65536, 2
    megatron = _decoder(seq, cp).cp_kv_bytes
    torch = _decoder(seq, cp, TORCH_CONTEXT_PARALLEL).cp_kv_bytes
    assert megatron == 2 * (seq // cp) * 8 * 128 * 2
    assert torch == 2 * (seq // cp) * 32 * 128 * 2


@pytest.mark.parametrize("backward", [False, True])
def test_torch_fp32_partials_add_memory_bound_time_per_step(backward: bool) -> None:
    # the merges / accumulations are HBM traffic beside the same flash kernels: at least the
    # fp32 output written once per step i >= 1 (4 bytes per element of 32K rows x 4096)
    seq, cp = 131072, 4
    mega = _attention_s(seq, cp, backward=backward)
    torch = _attention_s(seq, cp, backward=backward, ring=TORCH_CONTEXT_PARALLEL)
    floor = (cp - 1) * 4.0 * (seq // cp) * 4096 / (H100.hbm_gbps * 1e9)
    assert torch - mega > floor


def _request(framework: str | None, seq: int, gpus: int, gbs: int) -> PlanRequest:
    return PlanRequest(
        model=LLAMA8B,
        cluster=ClusterSpec(gpu="H100-SXM-80GB", num_gpus=gpus, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=gbs, seq_length=seq, dtype="bf16"),
        constraints=Constraints(framework=framework),  # type: ignore[arg-type]
    )


def test_without_cp_the_framework_changes_nothing() -> None:
    c = Candidate(dp=8, zero_stage=3, recompute="full")
    a = evaluate(_request("torchtitan", 32768, 8, 8), c)
    b = evaluate(_request("megatron", 32768, 8, 8), c)
    assert a.step_time_s == b.step_time_s
    assert a.peak_memory_bytes == b.peak_memory_bytes


def test_torch_gather_hides_behind_step_zero_and_the_last_grad_send_shows() -> None:
    # torch issues the all-gather before step 0's kernel: at 128K, cp 4 the kernel (tens of
    # ms) hides a gather of 3 x 268 MB on NVLink; the backward's last dK, dV send (fp32) waits
    # at the end of the ring with no kernel behind it
    cost = _decoder(131072, 4, TORCH_CONTEXT_PARALLEL)
    cluster = ClusterSpec(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=8)
    c = Candidate(cp=4, dp=2, cp_comm="all_gather")
    links = folded_links(cluster, c, achieved=1.0, experts=False, ring=TORCH_CONTEXT_PARALLEL)
    fw, bw = cp_times(cost, links)
    assert fw == 0.0
    assert bw == pytest.approx(p2p_s(2.0 * cost.cp_kv_bytes, link=links.cp_ring))
    # Megatron-Core's all-gather completes before the core, which then runs its two
    # kernels: core + exchange = the gather form's core + the whole gather
    mega = _decoder(131072, 4)
    mlinks = folded_links(cluster, c, achieved=1.0, experts=False)
    gathered = all_gather_s(4 * mega.cp_kv_bytes, group=4, link=mlinks.cp_gather)
    total = mega.attention_fw_s + cp_times(mega, mlinks)[0]
    assert total == pytest.approx(mega.cp_gather_fw_s + gathered)


def test_megatron_all_gather_core_is_two_kernels_over_the_gathered_keys() -> None:
    # Transformer Engine's all-gather form: the rank's 2c queries over all s keys, half the
    # pairs masked, in two launches; the same pairs as the ring's cp steps, so at whole
    # tiles the two forms agree, and at short chunks (4K over cp 16: chunks of 128) the
    # ring's 16 step kernels and per-step corrections cost more than the two
    long = _decoder(131072, 4)
    assert long.cp_gather_fw_s == pytest.approx(long.attention_fw_s, rel=0.06)
    short = _decoder(4096, 16)
    assert short.cp_gather_fw_s < short.attention_fw_s
    assert short.cp_gather_bw_s < short.attention_bw_s
    # torch runs its ring under all-gather too: no separate gather form
    torch = _decoder(4096, 16, TORCH_CONTEXT_PARALLEL)
    assert torch.cp_gather_fw_s == torch.cp_gather_bw_s == 0.0
