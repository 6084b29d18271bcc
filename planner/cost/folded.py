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
  the all-gather again and the reduce-scatter of dK, dV: twice that.
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
from planner.specs.request import Candidate


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


def folded_links(
    cluster: ClusterSpec, c: Candidate, *, achieved: float, experts: bool
) -> FoldedLinks:
    """The links of `c`'s groups (module docstring), each at `achieved` of its bandwidth.
    `experts`: whether the model has routed experts (their gradient group is edp). Without
    cp, ep, etp and experts only the dense gradient link is used, and it stands in for the
    others (cp_times and ep_time return 0 for groups of one)."""
    tp, cp = c.tp, c.cp
    dense = strided_link(cluster, stride=tp, size=c.dp * cp).achieved(achieved)
    if cp == 1 and c.ep == 1 and c.etp == 1 and not experts:
        return FoldedLinks(1, c.cp_comm, 1, 1, dense, dense, 1, dense, dense, dense, dense, dense)
    return FoldedLinks(
        cp=cp,
        cp_comm=c.cp_comm,
        ep=c.ep,
        etp=c.etp,
        cp_ring=ring_p2p_link(cluster, stride=tp, size=cp).achieved(achieved),
        cp_gather=strided_link(cluster, stride=tp, size=cp).achieved(achieved),
        ep_per_node=members_per_node(cluster, stride=c.etp, size=c.ep),
        intra=intra_link(cluster).achieved(achieved),
        inter=inter_link(cluster).achieved(achieved),
        etp_link=strided_link(cluster, stride=1, size=c.etp).achieved(achieved),
        dense_grad=dense,
        expert_grad=strided_link(cluster, stride=c.etp * c.ep, size=c.edp).achieved(achieved),
    )


def cp_times(cost: LayerCost, links: FoldedLinks) -> tuple[float, float]:
    """(forward, backward) seconds of the layer's K/V exchange that compute does not hide."""
    cp, kv = links.cp, cost.cp_kv_bytes
    if cp <= 1 or kv <= 0:
        return 0.0, 0.0
    if links.cp_comm == "all_gather":
        fw = all_gather_s(cp * kv, group=cp, link=links.cp_gather)
        return fw, 2.0 * fw
    steps = cp - 1
    fw = steps * max(0.0, p2p_s(kv, link=links.cp_ring) - cost.attention_fw_s / cp)
    bw = steps * max(0.0, p2p_s(2.0 * kv, link=links.cp_ring) - cost.attention_bw_s / cp)
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
    gradients in the backward (2 cp S in all)."""
    total = 0.0
    if links.ep > 1:
        total += 2.0 * max((c.ep_dispatch_bytes for c in costs), default=0.0)
    if links.cp > 1:
        kv = max((c.cp_kv_bytes for c in costs), default=0.0)
        total += (2.0 * links.cp if links.cp_comm == "all_gather" else 2.0) * kv
    return total
