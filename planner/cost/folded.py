"""Context- and expert-parallel communication of one layer, and the folded gradient groups.

Rank order (Megatron-Core `initialize_model_parallel`, docs/moe.md): the attention grid is
tp innermost, then cp, then dp, pp outermost; the expert grid on the same GPUs etp, then ep,
then edp. So the cp group is cp ranks tp apart, the dense gradient group the dp x cp ranks
tp apart, the ep group ep ranks etp apart and the edp group edp ranks etp x ep apart
(planner.cost.comm.strided_link for the collectives' links).

Context parallelism, per attention layer and micro-batch, S = the K and V a rank holds
(LayerCost.cp_kv_bytes):
- `p2p` ring (Megatron-Core's default `--cp-comm-type p2p`; Liu et al. 2023, Ring
  Attention): cp - 1 steps, each sending S to the next rank while the attention of the
  chunks already here runs; a step takes max(its compute, its send), so what shows is
      forward  (cp - 1) x max(0, p2p(S) - attention_fw / cp)
      backward (cp - 1) x max(0, p2p(2S) - attention_bw / cp)   (K, V and dK, dV travel)
- `all_gather` (Llama 3, Dubey et al. 2024 §3.3.2: K and V all-gathered, then the local
  queries' attention): forward all_gather(cp S) before the core, not overlapped; backward
  the all-gather again and the reduce-scatter of dK, dV: twice that. Its core is two kernels
  over the gathered keys (LayerCost.cp_gather_fw_s / cp_gather_bw_s) instead of the ring's
  steps in the layer's times: the difference is added here.
- torch's ring (torchtitan; planner.catalog.ring_attention.TORCH_CONTEXT_PARALLEL): the
  all-gather is issued before step 0's kernel and waited after it, so the forward shows
  max(0, all_gather(cp S) - attention_fw / cp) and the backward's own all-gather
  max(0, all_gather(cp S) - attention_bw / cp); dK, dV (fp32: g S, g = 2) go round by an
  all-to-all permutation after each of the cp backward steps, each hidden by the next step's
  kernel but the last: (cp - 1) x max(0, p2p(g S) - attention_bw / cp) + p2p(g S). With its
  all-to-all rotation (`p2p` here) K, V travel each step as in the ring above, beside dK, dV.
Expert parallelism, per MoE layer and micro-batch, D = the bytes the busiest rank moves
(LayerCost.ep_dispatch_bytes: its token copies x the load imbalance): dispatch and combine
all-to-alls in the forward and their reverses in the backward (Megatron-Core's alltoall
token dispatcher), not overlapped with compute (its `--moe-shared-expert-overlap` and
DeepEP overlaps are not modelled). With etp > 1 the rows a rank's experts process
(LayerCost.etp_gather_bytes) are all-gathered over etp before them and reduce-scattered
after, again mirrored in the backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from planner.catalog.ring_attention import MEGATRON_CORE, RingAttention, ring_attention_for
from planner.cost.comm import (
    Link,
    all_gather_s,
    all_to_all_s,
    inter_link,
    intra_link,
    members_per_node,
    p2p_s,
    ring_p2p_link,
    strided_link,
)
from planner.specs.cluster import ClusterSpec
from planner.specs.model import LayerCost
from planner.specs.request import Candidate, PlanRequest


@dataclass(frozen=True)
class FoldedLinks:
    """The links of a candidate's cp, ep, etp and gradient groups, at NCCL's achieved share."""

    cp: int
    cp_comm: str
    ep: int
    etp: int
    cp_ring: Link
    cp_gather: Link
    ep_per_node: int
    intra: Link
    inter: Link
    etp_link: Link
    dense_grad: Link  # dp x cp
    expert_grad: Link  # edp
    ring: RingAttention = MEGATRON_CORE  # the framework's cp implementation


class CpGroup(Protocol):
    """What cp_times reads of a candidate's links: its cp group's degree, exchange, ring
    implementation and links (FoldedLinks, or CpLinks where nothing else is known)."""

    @property
    def cp(self) -> int: ...
    @property
    def cp_comm(self) -> str: ...
    @property
    def cp_ring(self) -> Link: ...
    @property
    def cp_gather(self) -> Link: ...
    @property
    def ring(self) -> RingAttention: ...


@dataclass(frozen=True)
class CpLinks:
    """A cp group's links alone (CpGroup): they read tp and cp only (cp_group_links), not ep,
    etp or dp, so one serves every candidate of a (tp, cp) point."""

    cp: int
    cp_comm: str
    cp_ring: Link
    cp_gather: Link
    ring: RingAttention = MEGATRON_CORE


def cp_group_links(cluster: ClusterSpec, *, tp: int, cp: int, achieved: float) -> tuple[Link, Link]:
    """(ring p2p link, all-gather link) of the cp group: cp ranks tp apart, at `achieved` of
    their bandwidth."""
    return (
        ring_p2p_link(cluster, stride=tp, size=cp).achieved(achieved),
        strided_link(cluster, stride=tp, size=cp).achieved(achieved),
    )


def folded_links(
    cluster: ClusterSpec,
    c: Candidate,
    *,
    achieved: float,
    experts: bool,
    ring: RingAttention = MEGATRON_CORE,
) -> FoldedLinks:
    """The links of `c`'s groups (module docstring), each at `achieved` of its bandwidth.
    `experts`: whether the model has routed experts (their gradient group is edp). Without
    cp, ep, etp and experts only the dense gradient link is used, and it stands in for the
    others (cp_times and ep_time return 0 for groups of one)."""
    tp, cp = c.tp, c.cp
    dense = strided_link(cluster, stride=tp, size=c.dp * cp).achieved(achieved)
    if cp == 1 and c.ep == 1 and c.etp == 1 and not experts:
        return FoldedLinks(1, c.cp_comm, 1, 1, dense, dense, 1, dense, dense, dense, dense, dense)
    cp_ring, cp_gather = cp_group_links(cluster, tp=tp, cp=cp, achieved=achieved)
    return FoldedLinks(
        cp=cp,
        cp_comm=c.cp_comm,
        ep=c.ep,
        etp=c.etp,
        cp_ring=cp_ring,
        cp_gather=cp_gather,
        ep_per_node=members_per_node(cluster, stride=c.etp, size=c.ep),
        intra=intra_link(cluster).achieved(achieved),
        inter=inter_link(cluster).achieved(achieved),
        etp_link=strided_link(cluster, stride=1, size=c.etp).achieved(achieved),
        dense_grad=dense,
        expert_grad=strided_link(cluster, stride=c.etp * c.ep, size=c.edp).achieved(achieved),
        ring=ring,
    )


def request_links(
    request: PlanRequest, c: Candidate, *, achieved: float, experts: bool
) -> FoldedLinks:
    """folded_links of `c` on the request's cluster with the request's framework's ring
    attention: what build_inputs prices and the search's kind floors read, from one place
    (a floor built with another ring than the inputs' is not a floor of them)."""
    ring = ring_attention_for(request.constraints.framework)
    return folded_links(request.cluster, c, achieved=achieved, experts=experts, ring=ring)


def cp_times(cost: LayerCost, links: CpGroup) -> tuple[float, float]:
    """(forward, backward) seconds of the layer's K/V exchange that compute does not hide."""
    cp, kv = links.cp, cost.cp_kv_bytes
    if cp <= 1 or kv <= 0:
        return 0.0, 0.0
    if links.ring.gather_overlaps_first_step:
        return _torch_cp_times(cost, links)
    if links.cp_comm == "all_gather":
        # the gather's core runs two kernels, not the ring's cp steps (the layer's times
        # carry the ring's): the difference goes with the exchange
        fw = all_gather_s(cp * kv, group=cp, link=links.cp_gather)
        core_fw = core_bw = 0.0
        if cost.cp_gather_fw_s > 0:  # 0: the gather's core is the layer's own
            core_fw = cost.cp_gather_fw_s - cost.attention_fw_s
            core_bw = cost.cp_gather_bw_s - cost.attention_bw_s
        return fw + core_fw, 2.0 * fw + core_bw
    steps = cp - 1
    fw = steps * max(0.0, p2p_s(kv, link=links.cp_ring) - cost.attention_fw_s / cp)
    bw = steps * max(0.0, p2p_s(2.0 * kv, link=links.cp_ring) - cost.attention_bw_s / cp)
    return fw, bw


def _torch_cp_times(cost: LayerCost, links: CpGroup) -> tuple[float, float]:
    """torch's ring (module docstring): what its kernels do not hide."""
    cp, kv = links.cp, cost.cp_kv_bytes
    step_fw, step_bw = cost.attention_fw_s / cp, cost.attention_bw_s / cp
    grad = p2p_s(links.ring.grad_bytes_factor * kv, link=links.cp_ring)
    if links.cp_comm == "all_gather":
        gather = all_gather_s(cp * kv, group=cp, link=links.cp_gather)
        fw = max(0.0, gather - step_fw)
        bw = max(0.0, gather - step_bw) + (cp - 1) * max(0.0, grad - step_bw) + grad
        return fw, bw
    send = p2p_s(kv, link=links.cp_ring)
    fw = (cp - 1) * max(0.0, send - step_fw)
    bw = (cp - 1) * max(0.0, send + grad - step_bw) + grad
    return fw, bw


def ep_time(cost: LayerCost, links: FoldedLinks) -> float:
    """Seconds of the layer's expert communication in one direction (forward, or the
    backward's mirror): two all-to-alls over ep and, with etp > 1, the all-gather and the
    reduce-scatter of the experts' rows over etp."""
    t = 0.0
    if links.ep > 1 and cost.ep_dispatch_bytes > 0:
        t += 2.0 * all_to_all_s(
            cost.ep_dispatch_bytes,
            group=links.ep,
            per_node=links.ep_per_node,
            intra=links.intra,
            inter=links.inter,
        )
    if links.etp > 1 and cost.etp_gather_bytes > 0:
        t += 2.0 * all_gather_s(cost.etp_gather_bytes, group=links.etp, link=links.etp_link)
    return t


def folded_buffer_bytes(costs: Sequence[LayerCost], links: FoldedLinks) -> float:
    """Communication buffers of the cp and ep exchanges on one GPU, the largest layer's (one
    layer exchanges at a time): the all-to-all's send and receive buffers, 2 D (Megatron-Core's
    alltoall dispatcher permutes into one and receives into the other); the ring's two K/V
    buffers (the step's and the next's, 2 S), or the all-gathered K and V (cp S) and their
    gradients in the backward (2 cp S in all). torch's ring (fp32 partials) adds its fp32
    tensors: the running output and dQ (S each where, as in torchtitan, K and V are repeated
    to every head so a head's Q, K, V and O are the same size), dK and dV (2 S) and the fp32
    dK, dV in flight, sent and received (4 S)."""
    total = 0.0
    if links.ep > 1:
        total += 2.0 * max((c.ep_dispatch_bytes for c in costs), default=0.0)
    if links.cp > 1:
        kv = max((c.cp_kv_bytes for c in costs), default=0.0)
        total += (2.0 * links.cp if links.cp_comm == "all_gather" else 2.0) * kv
        if links.ring.fp32_partials:
            total += 8.0 * kv
    return total
