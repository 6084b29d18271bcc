"""Communication times: which link a group sits on, and collective formulas on it.

Rank placement is Megatron-LM's order: tp fastest, then dp, then pp, i.e.
global rank = tp_rank + tp * (dp_rank + dp * pp_rank), and node = rank // gpus_per_node.
So a TP group is `tp` consecutive ranks, a DP group strides by `tp` over `tp*dp` ranks, and
pipeline neighbours are `tp*dp` ranks apart.

Bandwidths (bytes/s per GPU, one direction) -- the "bus bandwidth" of NCCL's
doc/PERFORMANCE.md, which the ring formulas below divide by:
- intra-node: half the GPU's bidirectional NVLink figure (`nvlink_gbps`, 600 GB/s on A100 ->
  300 GB/s); `cluster.intra_node_gbps` overrides that bidirectional figure;
- inter-node: `inter_node_gbps` per GPU as given (one HCA per GPU: 25 GB/s for HDR 200 Gb/s).
Each collective also pays the link's latency once (`intra_node_latency_s`/`inter_node_latency_s`;
NCCL's low-latency protocols keep small collectives near one hop). This is the alpha-beta model
(Hockney 1994; Thakur, Rabenseifner & Gropp 2005 for the ring algorithms): t = alpha + S_eff / beta,
so the achieved bandwidth S_eff / t falls at small messages, to half of beta at S_eff = alpha * beta
(10 us x 240 GB/s = 2.4 MB on NVLink). The cost model uses every link at `link_fraction` of its
bus bandwidth (`Link.achieved`).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.cluster import ClusterSpec


@dataclass(frozen=True)
class Link:
    name: str  # "intra-node" or "inter-node"
    bytes_per_s: float
    latency_s: float

    def achieved(self, fraction: float) -> Link:
        """The link at `fraction` of its bus bandwidth: what NCCL's rings reach (the calibrated
        `link_fraction`, planner.catalog.efficiency); the latency is unchanged."""
        return Link(self.name, self.bytes_per_s * fraction, self.latency_s)


def intra_link(cluster: ClusterSpec) -> Link:
    return Link("intra-node", cluster.device.nvlink_gbps / 2 * 1e9, cluster.intra_node_latency_s)


def inter_link(cluster: ClusterSpec) -> Link:
    return Link("inter-node", cluster.device.inter_node_gbps * 1e9, cluster.inter_node_latency_s)


def _group_in_node(cluster: ClusterSpec, span: int) -> bool:
    """Is a group of `span` consecutive ranks (aligned to a multiple of span) inside one node?"""
    g = cluster.gpus_per_node
    return cluster.num_gpus <= g or (span <= g and g % span == 0)


def _spanning_link(cluster: ClusterSpec, members_per_node: int) -> Link:
    """A group that spans nodes with `members_per_node` members in each: one NCCL ring per NIC,
    so k members' NICs carry k rings: k x the per-GPU inter-node bandwidth, at most NVLink's."""
    k = max(1, members_per_node)
    inter = inter_link(cluster)
    bandwidth = min(intra_link(cluster).bytes_per_s, k * inter.bytes_per_s)
    return Link("inter-node", bandwidth, inter.latency_s)


def tp_link(cluster: ClusterSpec, *, tp: int) -> Link:
    """The TP group is tp consecutive ranks (across nodes only with constraints.tp_across_nodes)."""
    if _group_in_node(cluster, tp):
        return intra_link(cluster)
    return _spanning_link(cluster, min(tp, cluster.gpus_per_node))


def dp_link(cluster: ClusterSpec, *, tp: int, dp: int) -> Link:
    """A DP group spans tp*dp consecutive ranks (stride tp): within a node it runs on NVLink.

    Across nodes, each node holds k = min(dp, gpus_per_node // tp) members of the group, each
    with its own NIC (DGX: one HCA per GPU). NCCL runs one ring per NIC, so k rings share the
    node's k NICs and the bus bandwidth is k x the per-GPU inter-node bandwidth, at most the
    NVLink bus bandwidth (nccl-tests on DGX A100 reach ~190 GB/s all-reduce bus bandwidth
    across nodes with 8 x HDR: k = 8 x 25 GB/s).
    """
    if _group_in_node(cluster, tp * dp):
        return intra_link(cluster)
    return _spanning_link(cluster, min(dp, cluster.gpus_per_node // tp))


def strided_link(cluster: ClusterSpec, *, stride: int, size: int) -> Link:
    """A collective group of `size` ranks `stride` apart (within stride * size consecutive
    ranks), on the link of dp_link's rule: NVLink when the span fits a node, else
    min(size, gpus_per_node // stride) rings over as many NICs. Megatron-Core's rank order
    (tp innermost, then cp, then dp; pp outermost; the expert grid etp, then ep, then edp):
    the cp group is (stride tp, size cp), the dense gradient group dp x cp (tp, cp dp), the
    ep group (etp, ep), the edp group (etp ep, edp)."""
    return dp_link(cluster, tp=stride, dp=size)


def ring_p2p_link(cluster: ClusterSpec, *, stride: int, size: int) -> Link:
    """The link a ring of point-to-point sends over such a group waits on: NVLink when the
    span fits a node, else the inter-node link of one GPU (in a ring step every rank sends
    at once, and the ranks at a node boundary each send over their own NIC)."""
    if _group_in_node(cluster, stride * size):
        return intra_link(cluster)
    return inter_link(cluster)


def members_per_node(cluster: ClusterSpec, *, stride: int, size: int) -> int:
    """How many members of such a group share each node."""
    if _group_in_node(cluster, stride * size):
        return size
    return max(1, min(size, cluster.gpus_per_node // stride))


def all_to_all_s(num_bytes: float, *, group: int, per_node: int, intra: Link, inter: Link) -> float:
    """All-to-all of `num_bytes` per rank over `group` ranks, `per_node` of them on each
    node: each rank keeps 1/k of its data and sends the rest (NCCL doc/PERFORMANCE.md:
    alltoall bus bandwidth = algorithm bandwidth x (k-1)/k), (per_node - 1)/k over NVLink
    and (group - per_node)/k over its own NIC at the same time; the slower of the two sets
    the time (DeepSeek-V3 §3.2.2: the IB share limits cross-node dispatch)."""
    if group <= 1 or num_bytes <= 0:
        return 0.0
    k = min(per_node, group)
    local = num_bytes * (k - 1) / group / intra.bytes_per_s
    if k == group:
        return local + intra.latency_s
    remote = num_bytes * (group - k) / group / inter.bytes_per_s
    return max(local, remote) + inter.latency_s


def pp_link(cluster: ClusterSpec, *, tp: int, dp: int, pp: int) -> Link:
    """Pipeline neighbours are tp*dp ranks apart: all on one node only when the whole job fits
    in one node. Otherwise some boundary crosses nodes (all of them when tp*dp >= gpus_per_node),
    and we charge every boundary the inter-node link (conservative when tp*dp < gpus_per_node)."""
    del tp, dp, pp  # the rule needs only the job's size; kept for the call sites' clarity
    return intra_link(cluster) if cluster.num_gpus <= cluster.gpus_per_node else inter_link(cluster)


def all_reduce_s(num_bytes: float, *, group: int, link: Link) -> float:
    """Ring all-reduce: 2(k-1)/k * S / bus bandwidth + latency (NCCL doc/PERFORMANCE.md)."""
    if group <= 1 or num_bytes <= 0:
        return 0.0
    return 2.0 * (group - 1) / group * num_bytes / link.bytes_per_s + link.latency_s


def all_gather_s(num_bytes: float, *, group: int, link: Link) -> float:
    """Ring all-gather or reduce-scatter of S total bytes: (k-1)/k * S / bus bandwidth + latency."""
    if group <= 1 or num_bytes <= 0:
        return 0.0
    return (group - 1) / group * num_bytes / link.bytes_per_s + link.latency_s


def p2p_s(num_bytes: float, *, link: Link) -> float:
    """One point-to-point send: S / bandwidth + latency."""
    return num_bytes / link.bytes_per_s + link.latency_s
