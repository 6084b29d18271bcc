"""One micro-batch's work of a configuration kind, from its layer costs and links alone.

The sweep's cheapest floor of a whole group (sweep_floors.work_floor; docs/search.md,
"Groups") is max(m W / pp, C): W one micro-batch's forward and backward through every layer at
the cheapest recompute (bounds.work_s), C micro-batch 0's forward and input-gradient chain
(bounds.chain_s). Both depend on the kind (tp, mbs, sp, whether the schedule splits the
backward, cp, cp_comm, ep, etp) only, and MoE and cp requests have thousands of kinds
(Mixtral 8x7B on 64 GPUs: 5,504), so building a whole PartitionInputs per kind (its Candidate
checked, memory terms, p2p, gradient sync) to read three of its rows made the floors most of
the sweep. `kind_work` computes W and C from what those rows are made of, as
planner.cost.inputs.build_inputs makes them:

    fw_s[l]       = fw_s + tp_dir (+ cp_fw + ep_dir)
    bw_input_s[l] = bw_i + bw_comm + (0 | selective recompute | full recompute + fw_comm)
    bw_weight_s[l] = bw_w

with tp_dir = 2 all_reduce(tp_comm_bytes / 4) on the TP link, cp_fw / cp_bw and ep_dir from
planner.cost.folded on the candidate's folded links, (bw_i, bw_w) the layer's split_costs()
for a split-backward schedule (zb-h1, zbv), else (bw_input_s, bw_weight_s). None of these
reads pp, dp, ZeRO, the schedule's order or the memory terms. tests/planner/search/
test_kinds.py checks that the two agree with work_s and chain_s of the built PartitionInputs
on MoE, cp and dense requests: a change to build_inputs' times that this module does not
follow fails there.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from planner.catalog.models import HEAD
from planner.catalog.ring_attention import ring_attention_for
from planner.cost.comm import Link, all_reduce_s, all_to_all_s, tp_link
from planner.cost.folded import (
    CpLinks,
    FoldedLinks,
    cp_group_links,
    cp_times,
    ep_time,
    request_links,
)
from planner.cost.inputs import gradient_terms
from planner.cost.memory import buffer_bytes, static_bytes
from planner.cost.partition import MODE_INDEX, SPLIT_BACKWARD
from planner.cost.source import CostSource, request_efficiency
from planner.memo import PerObject
from planner.search.space import Config, cp_comms
from planner.specs.model import LayerCost
from planner.specs.request import PlanRequest

# what one kind's W and C depend on: (tp, mbs, sp, split backward, cp, cp_comm, ep, etp)
KindKey = tuple[int, int, bool, bool, int, str, int, int]
# the kinds a coarse floor covers: (tp, mbs, sp, cp), every split, cp_comm, ep and etp
CoarseKey = tuple[int, int, bool, int]


def kind_key(cfg: Config) -> KindKey:
    split = cfg.schedule in SPLIT_BACKWARD
    return (
        cfg.tp,
        cfg.micro_batch_size,
        cfg.sequence_parallel,
        split,
        cfg.cp,
        cfg.cp_comm,
        cfg.ep,
        cfg.etp,
    )


def kind_layer_costs(src: CostSource, cfg: Config) -> tuple[LayerCost, ...]:
    """The cost source's layer costs at `cfg`'s (mbs, tp, sp, cp, ep, etp): what a kind's
    terms are read from."""
    return src.layer_costs(
        micro_batch_size=cfg.micro_batch_size,
        tp=cfg.tp,
        sequence_parallel=cfg.sequence_parallel,
        cp=cfg.cp,
        ep=cfg.ep,
        etp=cfg.etp,
    )


def kind_work(request: PlanRequest, src: CostSource, cfg: Config) -> tuple[float, float]:
    """(W, C) of `cfg`'s kind (module docstring): bounds.work_s and bounds.chain_s of its
    PartitionInputs, without building them (nor checking its Candidate: a member the cost
    model would refuse may lower a group's floor, never raise it). Raises SpecError or
    ValueError where the cost source has no costs for the point."""
    costs = kind_layer_costs(src, cfg)
    tlink, folded = _links_of(request, src, cfg)
    split = cfg.schedule in SPLIT_BACKWARD
    fw = bw = bw_weight = 0.0
    done: dict[int, tuple[float, float, float]] = {}  # a kind's layers share one LayerCost
    for cost in costs:
        terms = done.get(id(cost))
        if terms is None:
            terms = done[id(cost)] = _layer_times(cost, cfg.tp, tlink, folded, split)
        fw += terms[0]
        bw += terms[1]
        bw_weight += terms[2]
    return fw + bw + bw_weight, fw + bw


def coarse_key(cfg: Config) -> CoarseKey:
    return (cfg.tp, cfg.micro_batch_size, cfg.sequence_parallel, cfg.cp)


def coarse_work(request: PlanRequest, src: CostSource, key: CoarseKey) -> tuple[float, float]:
    """(W, C) floors of every kind under `key` = (tp, mbs, sp, cp): at most kind_work's of
    each, whatever its split backward, cp_comm, ep and etp. One cost evaluation per key
    (CostSource.floor_costs) instead of one per kind: DeepSeek-V3 on 2,048 GPUs has
    69,660 kinds under 848 keys.

    Why each term is a minimum over what it covers, in kind_work's sums (in the same order:
    rounded addition is monotone, so sums of terms each no larger are no larger):
    - fw_s, bw_i, bw_w: floor_costs' are at most the layer's at every (ep, etp), and the
      least of the split and the full backward is taken (W and C each);
    - tp_dir reads tp and the TP link only: the same in every kind of the key;
    - ep_dir >= 0 (all-to-all and etp gather times) is dropped;
    - the K/V exchange (planner.cost.folded.cp_times) reads the layer's attention terms
      (the same at every ep and etp) and the cp group's links, which read tp and cp only
      (cp_group_links): each kind's term is exactly its cp_comm's at the key, so the least
      over the cp_comm values (of the whole sums, as over the split) is at most every kind's;
    - recompute adds >= 0 to the input-gradient backward: the least mode's is bw_i + comm.
    Raises as CostSource.layer_costs does where there are no costs at the point."""
    tp, mbs, sp, cp = key
    costs = src.floor_costs(micro_batch_size=mbs, tp=tp, sequence_parallel=sp, cp=cp)
    achieved = request_efficiency(request).link_fraction
    tlink = tp_link(request.cluster, tp=tp).achieved(achieved)
    return _least_sums(costs, tp, tlink, _cp_options(request, tp, cp), (0.0,) * len(costs))


def _cp_options(request: PlanRequest, tp: int, cp: int) -> tuple[CpLinks | None, ...]:
    """The cp group's links under each cp_comm the request's configurations may use at
    (tp, cp) (space.cp_comms), with the request's ring attention (None alone at cp = 1: no
    exchange)."""
    if cp == 1:
        return (None,)
    achieved = request_efficiency(request).link_fraction
    ring_link, gather_link = cp_group_links(request.cluster, tp=tp, cp=cp, achieved=achieved)
    ring = ring_attention_for(request.constraints.framework)
    return tuple(CpLinks(cp, comm, ring_link, gather_link, ring) for comm in cp_comms(request))


def _least_sums(
    costs: tuple[LayerCost, ...],
    tp: int,
    tlink: Link,
    options: tuple[CpLinks | None, ...],
    ep_dirs: tuple[float, ...],
) -> tuple[float, float]:
    """The least (W, C) over the split backward and the cp `options` of kind_work's sums with
    _floor_layer_times' terms (`ep_dirs`: each layer's expert communication floor)."""
    best_w = best_c = float("inf")
    for split in (False, True):
        for links in options:
            fw = bw = bw_weight = 0.0
            done: dict[tuple[int, float], tuple[float, float, float]] = {}
            for cost, ep_dir in zip(costs, ep_dirs, strict=True):
                terms = done.get((id(cost), ep_dir))
                if terms is None:
                    terms = _floor_layer_times(cost, tp, tlink, split, links, ep_dir)
                    done[(id(cost), ep_dir)] = terms
                fw += terms[0]
                bw += terms[1]
                bw_weight += terms[2]
            best_w, best_c = min(best_w, fw + bw + bw_weight), min(best_c, fw + bw)
    return best_w, best_c


def _floor_layer_times(
    cost: LayerCost,
    tp: int,
    tlink: Link,
    split: bool,
    links: CpLinks | None,
    ep_dir: float = 0.0,
) -> tuple[float, float, float]:
    """_layer_times' terms under `links`' cp exchange (None: no cp), at or below every kind's
    of that cp_comm (coarse_work), with `ep_dir` at most the kinds' expert communication in
    each direction (expert_work; 0: left out, exactly the coarse terms, as x + 0.0 == x)."""
    bw_i, bw_w, tp_dir = _backward_and_tp(cost, tp, tlink, split)
    cp_fw, cp_bw = cp_times(cost, links) if links is not None else (0.0, 0.0)
    # (tp_dir + cp) + ep_dir: the order of _layer_times' fw_comm and bw_comm
    return cost.fw_s + ((tp_dir + cp_fw) + ep_dir), bw_i + ((tp_dir + cp_bw) + ep_dir), bw_w


# the kinds an expert floor covers: (tp, mbs, sp, cp, ep, etp), every split and cp_comm
ExpertKey = tuple[int, int, bool, int, int, int]


def expert_key(cfg: Config) -> ExpertKey:
    return (cfg.tp, cfg.micro_batch_size, cfg.sequence_parallel, cfg.cp, cfg.ep, cfg.etp)


# The fields of a group's first member that its coarse and expert floors read (coarse_key,
# expert_key, m and pp; the members of a group share them): groups equal in them have the
# same coarse and expert floors.
FloorFields = tuple[int, int, bool, int, int, int, int, int]
floor_fields: Callable[[Config], FloorFields] = operator.attrgetter(
    "tp", "micro_batch_size", "sequence_parallel", "cp", "ep", "etp", "num_microbatches", "pp"
)


def expert_work(request: PlanRequest, src: CostSource, cfg: Config) -> tuple[float, float]:
    """(W, C) floors of every kind under `cfg`'s expert_key (whatever its split backward and
    cp_comm): coarse_work's terms plus each MoE layer's expert all-to-alls, so between
    coarse_work's and kind_work's. Without it a group of ep > 1 has only the coarse floor
    before kind_work, whose ep collectives (the all-to-alls crossing nodes: most of the
    difference on DeepSeek-V3) the coarse floor drops; kind_work costs one cost-model
    evaluation per (mbs, tp, sp, cp, ep, etp) (DeepSeek-V3 on 2,048 GPUs: ~50,000 kinds
    below the incumbent by their coarse floor), this one per (mbs, tp, sp, cp) and
    arithmetic per key.

    The all-to-all term: ep_time's first part, 2 all_to_all_s(ep_dispatch_bytes, ep, the ep
    group's members per node, the intra and inter links) from the kind's folded links (which
    read tp, cp, ep and etp only, not cp_comm's choice for the ep group), in ep_time's order
    (0.0 + that, exact), with the etp gather (>= 0) left out; each layer's ep_dispatch_bytes
    is the busiest rank's load_imbalance T_r k h d with T_r = mbs s / (cp tp)
    (planner.catalog.moe_work.ExpertShape.dispatch_bytes), the same at every ep > 1 and etp
    of the point, so they are read once per (mbs, tp, sp, cp) at the first ep > 1 asked
    (tests/planner/search/test_expert_floor.py checks that sameness on every point of the
    MoE bench requests, and the floor against kind_work of every kind). The rest is
    coarse_work's argument, each term no larger than kind_work's and added in its order.
    Raises as CostSource.layer_costs does where there are no costs at the point."""
    tp, mbs, sp, cp = coarse_key(cfg)
    costs = src.floor_costs(micro_batch_size=mbs, tp=tp, sequence_parallel=sp, cp=cp)
    tlink, folded = _links_of(request, src, cfg)
    dispatch = _dispatch_bytes(src, cfg)
    per_bytes = {sent: _all_to_alls(sent, folded) for sent in set(dispatch)}  # a few kinds
    ep_dirs = tuple(per_bytes[sent] for sent in dispatch)
    return _least_sums(costs, tp, tlink, _cp_options(request, tp, cp), ep_dirs)


def _all_to_alls(sent: float, folded: FoldedLinks | None) -> float:
    """ep_time's all-to-all part of a layer that dispatches `sent` bytes, in its order (0.0
    + that); 0.0 without an ep group."""
    if folded is None or folded.ep == 1 or sent <= 0:
        return 0.0
    return 0.0 + 2.0 * all_to_all_s(
        sent,
        group=folded.ep,
        per_node=folded.ep_per_node,
        intra=folded.intra,
        inter=folded.inter,
    )


# per source (by identity, planner.memo's policy): (mbs, tp, sp, cp) -> each layer's
# ep_dispatch_bytes at ep > 1 (expert_work)
_DISPATCH: PerObject[dict[CoarseKey, tuple[float, ...]]] = PerObject()


def _dispatch_bytes(src: CostSource, cfg: Config) -> tuple[float, ...]:
    """Each layer's ep_dispatch_bytes at `cfg`'s (mbs, tp, sp, cp) and any ep > 1 (the same at
    every ep > 1 and etp: expert_work); zeros at ep = 1, where no layer dispatches."""
    if cfg.ep == 1:
        return (0.0,) * len(src.layers)
    per_source = _DISPATCH.get(src, dict)
    key = coarse_key(cfg)
    known = per_source.get(key)
    if known is None:
        known = per_source[key] = tuple(c.ep_dispatch_bytes for c in kind_layer_costs(src, cfg))
    return known


def kind_links(
    request: PlanRequest, src: CostSource, cfg: Config
) -> tuple[Link, FoldedLinks | None]:
    """The TP link and, with cp, ep or etp above 1, the folded links, as build_inputs takes
    them (folded.request_links: the request's achieved link fraction and ring attention).
    Their cp, ep and etp
    links depend on (tp, cp, cp_comm, ep, etp) only; dp enters only the gradient links,
    which W and C do not read."""
    achieved = request_efficiency(request).link_fraction
    tlink = tp_link(request.cluster, tp=cfg.tp).achieved(achieved)
    if not (cfg.cp > 1 or cfg.ep > 1 or cfg.etp > 1):
        return tlink, None
    experts = src.arch is not None and src.arch.moe is not None
    folded = request_links(request, cfg.candidate(), achieved=achieved, experts=experts)
    return tlink, folded


# per request (by identity, planner.memo's policy): (tp, cp, cp_comm, ep, etp) -> its links;
# a dict that fills lazily with pure values
_LINKS: PerObject[dict[tuple[int, int, str, int, int], tuple[Link, FoldedLinks | None]]] = (
    PerObject()
)


def _links_of(
    request: PlanRequest, src: CostSource, cfg: Config
) -> tuple[Link, FoldedLinks | None]:
    """kind_links of cfg's (tp, cp, cp_comm, ep, etp), computed once per request (_LINKS)."""
    per_request = _LINKS.get(request, dict)
    key = (cfg.tp, cfg.cp, cfg.cp_comm, cfg.ep, cfg.etp)
    links = per_request.get(key)
    if links is None:
        links = per_request[key] = kind_links(request, src, cfg)
    return links


def _layer_times(
    cost: LayerCost, tp: int, tlink: Link, folded: FoldedLinks | None, split: bool
) -> tuple[float, float, float]:
    """(fw_s, least bw_input_s over the recompute modes, bw_weight_s) of one layer."""
    bw_i, bw_w, tp_dir = _backward_and_tp(cost, tp, tlink, split)
    fw_comm = bw_comm = tp_dir
    if folded is not None:
        cp_fw, cp_bw = cp_times(cost, folded)
        ep_dir = ep_time(cost, folded)
        fw_comm, bw_comm = tp_dir + cp_fw + ep_dir, tp_dir + cp_bw + ep_dir
    recompute_comm = fw_comm if cost.recompute_s.full > 0 else 0.0
    least = min(
        bw_i + bw_comm,
        bw_i + cost.recompute_s.selective + bw_comm,
        bw_i + cost.recompute_s.full + bw_comm + recompute_comm,
    )
    return cost.fw_s + fw_comm, least, bw_w


def _backward_and_tp(
    cost: LayerCost, tp: int, tlink: Link, split: bool
) -> tuple[float, float, float]:
    """(bw_input_s, bw_weight_s) as the schedule runs the backward (split or whole), and the
    layer's tensor-parallel communication time in each direction (forward, backward)."""
    bw_i, bw_w = cost.split_costs() if split else (cost.bw_input_s, cost.bw_weight_s)
    return bw_i, bw_w, 2 * all_reduce_s(cost.tp_comm_bytes / 4, group=tp, link=tlink)


# what one group's memory floor depends on (kind_memory_floor_bytes): (tp, mbs, sp, cp, ep,
# etp, pp, dp, ZeRO, modes, whether the tied embedding and head may share a rank)
MemoryKey = tuple[int, int, bool, int, int, int, int, int, int, tuple[str, ...], bool]


_SCHEDULE = operator.attrgetter("schedule")


def ends_share_rank(members: list[Config]) -> bool:
    """Whether some member of a sweep group puts the first and the last stage on one rank
    (planner.schedules.stage_to_rank puts stage s on rank s % pp except zbv's V, whose last
    stage is on rank 0 with the first)."""
    return members[0].pp == 1 or "zbv" in map(_SCHEDULE, members)


def group_memory_key(members: list[Config]) -> MemoryKey:
    """The memory_key of a sweep group (its members share every term but the schedule and
    vpp), `shared` by ends_share_rank."""
    return memory_key(members[0], ends_share_rank(members))


def memory_key(cfg: Config, shared: bool) -> MemoryKey:
    return (
        cfg.tp,
        cfg.micro_batch_size,
        cfg.sequence_parallel,
        cfg.cp,
        cfg.ep,
        cfg.etp,
        cfg.pp,
        cfg.dp,
        cfg.zero_stage,
        tuple(cfg.modes),
        shared,
    )


def kind_memory_floor_bytes(
    request: PlanRequest, src: CostSource, cfg: Config, *, shared: bool
) -> float:
    """At most bounds.group_memory_floor_bytes of the restricted PartitionInputs
    (bounds.restricted to cfg.modes) of every configuration with cfg's memory_key, without
    building them: fixed + (sum static + sum of each layer's least activation bytes over the
    modes) / pp, from the terms planner.cost.inputs.build_inputs makes them of:

        fixed       = reserve + buffer_bytes(boundary, pp, tp) (+ the cp / ep exchange
                      buffers, >= 0, left out)
        static[l]   = static_bytes(dense, ZeRO, dp cp) + static_bytes(expert, ZeRO, edp),
                      dense = param_count - expert_param_count, less the head's copy of the
                      tied word embeddings (V h / tp) where embedding and head share a rank
        activation  = the layer's (none, selective, full) activation bytes

    None of these reads the schedule or vpp except that share: with `shared` (some member
    may put the first and last stage on one rank: pp 1, zbv) the head's copy is left out,
    which static_bytes (linear in the count, nonnegative coefficients) can only lower. The
    sums are taken in another order than build_inputs' (the caller allows for rounding).
    Raises as CostSource.layer_costs does where there are no costs at the point."""
    costs = kind_layer_costs(src, cfg)
    training = request.training
    arch = src.arch
    tied = arch is not None and arch.tied and shared
    word_params = arch.vocab_size * arch.hidden_size / cfg.tp if arch is not None else 0.0
    ks = sorted({MODE_INDEX[m] for m in cfg.modes}) or list(range(len(MODE_INDEX)))
    z, dense_dp = cfg.zero_stage, cfg.dp * cfg.cp
    edp = cfg.tp * cfg.cp * cfg.dp // (cfg.etp * cfg.ep)  # Candidate.edp
    runs, boundary = _MEMORY_RUNS.get(src, dict).get(id(costs)) or _memory_runs(src, costs)
    static = act = 0.0
    for cost, count, is_head in runs:
        params = cost.param_count
        if tied and is_head:
            params = max(0.0, params - word_params)
        expert = cost.expert_param_count
        sb = static_bytes(params - expert, training=training, zero_stage=z, dp=dense_dp)
        if expert > 0:
            sb = sb.plus(static_bytes(expert, training=training, zero_stage=z, dp=edp))
        av = cost.activation_bytes
        triple = (av.none, av.selective, av.full)
        static += count * sb.total_bytes
        act += count * min(triple[k] for k in ks)
    tp, sp = cfg.tp, cfg.sequence_parallel
    sent = boundary / tp if tp > 1 and not sp else boundary
    full = boundary * tp if sp else boundary
    buffers = buffer_bytes(boundary_bytes=sent, full_activation_bytes=full, pp=cfg.pp, tp=tp)
    return request.reserve_bytes + buffers + (static + act) / cfg.pp


# what kind_memory_floor_bytes reads of one cost point's layers: each distinct (LayerCost,
# is the head) with its count, and the largest boundary output (every layer's but the last)
MemoryRuns = tuple[tuple[tuple[LayerCost, int, bool], ...], float]

# per source (by identity, planner.memo's policy): id(layer costs) -> their MemoryRuns; the
# costs are the source's own cached tuples, alive as long as it is
_MEMORY_RUNS: PerObject[dict[int, MemoryRuns]] = PerObject()


def _memory_runs(src: CostSource, costs: tuple[LayerCost, ...]) -> MemoryRuns:
    n = len(costs)
    counts: dict[tuple[int, bool], tuple[LayerCost, int]] = {}
    for i, cost in enumerate(costs):
        key = (id(cost), i == n - 1 and src.layers[i].kind == HEAD)
        seen = counts.get(key)
        counts[key] = (cost, 1 if seen is None else seen[1] + 1)
    runs = tuple((cost, count, key[1]) for key, (cost, count) in counts.items())
    boundary = max((c.output_bytes for c in costs[:-1]), default=0.0)
    out = (runs, boundary)
    _MEMORY_RUNS.get(src, dict)[id(costs)] = out
    return out


# what one group's post floor depends on (kind_post_floor_s): (tp, mbs, sp, cp, ep, etp, dp,
# ZeRO, whether the tied embedding and head may share a rank)
PostKey = tuple[int, int, bool, int, int, int, int, int, bool]


def group_post_key(members: list[Config]) -> PostKey:
    """The post_key of a sweep group (its members share every term but the schedule and vpp;
    `shared` by ends_share_rank)."""
    cfg = members[0]
    return (
        cfg.tp,
        cfg.micro_batch_size,
        cfg.sequence_parallel,
        cfg.cp,
        cfg.ep,
        cfg.etp,
        cfg.dp,
        cfg.zero_stage,
        ends_share_rank(members),
    )


def kind_post_floor_s(request: PlanRequest, src: CostSource, cfg: Config, *, shared: bool) -> float:
    """At most sum(post_s) of the PartitionInputs of every configuration with cfg's post key,
    without building them: each layer's DP gradient sync + optimizer step
    (planner.cost.inputs.gradient_terms, the function build_inputs prices them with, on the
    same links: the dense gradients' over dp x cp, the experts' over edp), summed over the
    layers in their order as bounds.time_floor_s sums post_s. None of it reads pp, the
    schedule or vpp, except the tied embeddings': build_inputs adds the embedding gradient's
    all-reduce (>= 0) on the first and the last layer where they sit on two ranks, left out
    here, and drops the head's copy of the word embeddings (V h / tp) from its parameters
    where they share one; with `shared` (some member may put the first and the last stage
    on one rank: pp 1, zbv) the copy is dropped, which lowers the head's terms (each is
    nondecreasing in the parameter count). Each layer's term is thus at most the built one
    (equal without tied embeddings), and so is the sum (rounded addition is monotone). Raises
    as CostSource.layer_costs does where there are no costs at the point."""
    costs = kind_layer_costs(src, cfg)
    training = request.training
    arch = src.arch
    tied = arch is not None and arch.tied and shared
    word_params = arch.vocab_size * arch.hidden_size / cfg.tp if arch is not None else 0.0
    links = _gradient_links_of(request, src, cfg)
    efficiency = request_efficiency(request)
    gpu = request.cluster.device
    z, dense_dp, m = cfg.zero_stage, cfg.dp * cfg.cp, cfg.num_microbatches
    edp = cfg.tp * cfg.cp * cfg.dp // (cfg.etp * cfg.ep)  # Candidate.edp
    last = len(costs) - 1
    done: dict[tuple[int, bool], float] = {}  # a kind's layers share one LayerCost
    terms = []
    for i, cost in enumerate(costs):
        is_head = i == last and src.layers[i].kind == HEAD
        key = (id(cost), is_head)
        post = done.get(key)
        if post is None:
            params = cost.param_count
            if tied and is_head:
                params = max(0.0, params - word_params)
            sync, step_bytes = gradient_terms(
                params,
                cost.expert_param_count,
                training=training,
                zero_stage=z,
                dense_dp=dense_dp,
                edp=edp,
                links=links,
                microbatches=m,
            )
            post = done[key] = sync + efficiency.memory_s(step_bytes, gpu)
        terms.append(post)
    return sum(terms)


# per request (by identity, planner.memo's policy): (tp, cp, dp, ep, etp) -> its links
_GRADIENT_LINKS: PerObject[dict[tuple[int, int, int, int, int], FoldedLinks]] = PerObject()


def _gradient_links_of(request: PlanRequest, src: CostSource, cfg: Config) -> FoldedLinks:
    """The folded links of cfg's (tp, cp, dp, ep, etp) as build_inputs takes them
    (folded.request_links), once per request: the gradient links read dp, the others do not
    read cp_comm's choice for the gradients (their dense_grad and expert_grad are the same)."""
    per_request = _GRADIENT_LINKS.get(request, dict)
    key = (cfg.tp, cfg.cp, cfg.dp, cfg.ep, cfg.etp)
    links = per_request.get(key)
    if links is None:
        achieved = request_efficiency(request).link_fraction
        experts = src.arch is not None and src.arch.moe is not None
        links = request_links(request, cfg.candidate(), achieved=achieved, experts=experts)
        per_request[key] = links
    return links
