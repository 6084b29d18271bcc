"""Build the PartitionInputs of a candidate: per-layer times (with communication) and bytes.

Per layer l at the candidate's (micro_batch_size, tp, sequence_parallel):
- TP collectives: `tp_comm_bytes` is split evenly between forward and backward, two
  collectives each way (Megatron's f and g operators, Shoeybi et al. 2019), each a ring
  all-reduce on the TP group's link (with sequence parallel an all-gather plus a
  reduce-scatter of the same total time). Full recompute re-runs the forward's collectives.
      fw_s[l]        = fw_s + tp_dir (+ cp_fw + ep_dir)
      bw_input_s[l]  = bw_input_s + recompute_s[mode] + tp_dir (+ cp_bw + ep_dir)
                       (+ the forward's communication again for `full`)
      bw_weight_s[l] = bw_weight_s
  cp_fw / cp_bw: the K/V exchange compute does not hide; ep_dir: the EP all-to-alls and the
  etp gather of one direction (planner.cost.folded).
  For a split-backward schedule (zb-h1, zbv) bw_input_s and bw_weight_s are the layer's
  `split_costs()`: I and W as the runtime's split backward runs them, when the profile
  measured them (`LayerCost.split_bw_input_s`, `split_bw_weight_s`; profiler.layer_profiler).
- p2p: the layer's output bytes (divided by tp with Megatron's scatter/gather optimisation,
  Narayanan 2021 §4.1, unless sequence parallel already shards it) over the pipeline link.
- static_bytes: params + grads + optimizer state per ZeRO stage (planner.cost.memory): the
  dense parameters sharded by ZeRO over dp x cp, the routed experts' over edp.
- post_s: DP gradient sync of the layer's gradients + its share of the optimizer step
  (memory-bound: bytes touched / (HBM bandwidth x the calibrated HBM fraction)), plus, for tied
  embeddings whose two copies sit on different pipeline ranks, the all-reduce of the
  embedding gradient between them (Megatron's embedding group).
- fixed_bytes: the request's reserve + communication buffers (planner.cost.memory, and the
  cp / ep exchange buffers of planner.cost.folded).
- held_points, loss_bytes, recompute_transient, fragmentation_fraction: each rank's activation
  peak over its timeline and the transients on top (planner.cost.memory.MemoryTerms).
- action_overhead: the pipeline runtime's fixed time per F / B / I / W action, from the
  profile (`ModelProfile.action_overhead_s`, measured by `profiler.action_overhead`); 0 for
  the analytic catalog. score_partition adds it to every stage's durations (partition.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from planner.catalog.efficiency import Efficiency
from planner.catalog.models import HEAD
from planner.cost.candidate import check_candidate
from planner.cost.comm import all_reduce_s, p2p_s, pp_link, tp_link
from planner.cost.folded import (
    FoldedLinks,
    cp_times,
    ep_time,
    folded_buffer_bytes,
    request_links,
)
from planner.cost.memory import (
    DEFAULT_MEMORY_TERMS,
    MemoryTerms,
    StaticBytes,
    buffer_bytes,
    dp_sync_s,
    loss_temporary_bytes,
    optimizer_step_bytes,
    static_bytes,
)
from planner.cost.partition import SPLIT_BACKWARD, ModeTriple, PartitionInputs
from planner.cost.source import CostSource, request_efficiency, resolve_costs
from planner.memo import PerObject
from planner.schedules import HeldPoint, held_points_of, peak_inflight_of, stage_ranks
from planner.specs.base import RECOMPUTE_MODES, ScheduleName
from planner.specs.model import LayerCost
from planner.specs.request import Candidate, PlanRequest
from planner.specs.training import TrainingSpec


@dataclass(frozen=True)
class LayerTerms:
    """What `partition_inputs` derived, kept apart for the per-rank breakdown of `evaluate`."""

    candidate: Candidate  # checked, stages filled
    costs: tuple[LayerCost, ...]
    static: tuple[StaticBytes, ...]
    dp_sync_s: tuple[float, ...]
    optimizer_s: tuple[float, ...]
    buffers_bytes: float
    reserve_bytes: float


# one layer's (fw, bw input per mode, bw weight, p2p, activation bytes per mode, static bytes,
# DP sync, optimizer step)
_Row = tuple[float, ModeTriple, float, float, ModeTriple, StaticBytes, float, float]


@lru_cache(maxsize=4096)
def _inflight(schedule: ScheduleName, pp: int, vpp: int, m: int) -> tuple[int, ...]:
    """Peak in-flight micro-batches per stage; depends only on the schedule's order (cached;
    planner.schedules.peak_inflight_of: the counts without building the schedule)."""
    return peak_inflight_of(schedule, pp=pp, vpp=vpp, num_microbatches=m)


def build_inputs(
    request: PlanRequest,
    candidate: Candidate,
    *,
    source: CostSource | None = None,
    efficiency: Efficiency | None = None,
    given_inflight: Callable[[int, int], int] | None = None,
    fill_stages: bool = True,
    memory_terms: MemoryTerms = DEFAULT_MEMORY_TERMS,
) -> tuple[PartitionInputs, LayerTerms]:
    """PartitionInputs of the candidate and the terms they were built from. `given_inflight`
    (stage, rank) -> count replaces the schedule's peak in-flight counts and held points
    (which generating the schedule finds): for callers that only need a lower bound of them;
    such inputs charge every stage of a rank at its count at once. `fill_stages=False`:
    the terms' candidate keeps no default stages (check_candidate). `efficiency` defaults to
    the request's constants (planner.cost.source.request_efficiency); a given `source` must
    have been resolved with the same ones."""
    if efficiency is None:
        efficiency = request_efficiency(request)
    src = source if source is not None else resolve_costs(request, efficiency=efficiency)
    c = check_candidate(request, candidate, source=src, fill_stages=fill_stages)
    cluster, training = request.cluster, request.training
    tp, pp, dp, sp = c.tp, c.pp, c.dp, c.sequence_parallel
    m = c.num_microbatches(training.global_batch_size)
    costs = src.layer_costs(
        micro_batch_size=c.micro_batch_size,
        tp=tp,
        sequence_parallel=sp,
        cp=c.cp,
        ep=c.ep,
        etp=c.etp,
    )
    stage_rank = stage_ranks(c.num_stages, pp=pp, schedule=c.schedule)
    held: tuple[tuple[HeldPoint, ...], ...] = ()
    if given_inflight is None:
        inflight = _inflight(c.schedule, pp, c.vpp, m)
        held = held_points_of(c.schedule, pp=pp, vpp=c.vpp, num_microbatches=m)
    else:
        inflight = tuple(given_inflight(s, r) for s, r in enumerate(stage_rank))

    achieved = efficiency.link_fraction  # NCCL's share of the bus bandwidth (comm.Link.achieved)
    tlink = tp_link(cluster, tp=tp).achieved(achieved)
    plink = pp_link(cluster, tp=tp, dp=dp, pp=pp).achieved(achieved)
    experts = src.arch is not None and src.arch.moe is not None
    folded = request_links(request, c, achieved=achieved, experts=experts)
    exchanges = c.cp > 1 or c.ep > 1 or c.etp > 1  # cp, ep or etp communication to add
    # dense gradients are reduced over dp x cp (cp folds into the data-parallel group, as
    # Megatron-Core does), the routed experts' over edp; ZeRO shards each over its group
    dense_dp, edp = dp * c.cp, c.edp
    gpu = cluster.device

    # Tied embeddings (gpt): the head's copy of the word embeddings is the same tensor when
    # embedding and head share a pipeline rank; otherwise both copies exist and their
    # gradients are all-reduced between the two ranks after the backward. A profile that
    # carries a tied arch follows the catalog's convention: the head's param_count includes
    # its copy of the word embeddings (V*h/tp).
    arch = src.arch
    tied = arch is not None and arch.tied
    shared_rank = stage_rank[0] == stage_rank[-1]
    word_params = arch.vocab_size * arch.hidden_size / tp if arch is not None else 0.0
    tied_sync_s = 0.0
    if tied and not shared_rank:
        tied_sync_s = all_reduce_s(word_params * training.dtype_bytes, group=2, link=plink)

    fw: list[float] = []
    bw_in: list[ModeTriple] = []
    bw_w: list[float] = []
    p2p: list[float] = []
    act: list[ModeTriple] = []
    static: list[StaticBytes] = []
    dps: list[float] = []
    opts: list[float] = []
    post: list[float] = []
    split = c.schedule in SPLIT_BACKWARD

    def layer_terms(cost: LayerCost, *, is_head: bool, first: bool) -> _Row:
        bw_i, bw_wt = cost.split_costs() if split else (cost.bw_input_s, cost.bw_weight_s)
        per_dir = cost.tp_comm_bytes / 2
        tp_dir = 2 * all_reduce_s(per_dir / 2, group=tp, link=tlink)
        fw_comm = bw_comm = tp_dir
        if exchanges:
            cp_fw, cp_bw = cp_times(cost, folded)
            ep_dir = ep_time(cost, folded)
            fw_comm, bw_comm = tp_dir + cp_fw + ep_dir, tp_dir + cp_bw + ep_dir
        recompute_comm = fw_comm if cost.recompute_s.full > 0 else 0.0
        bw = (
            bw_i + bw_comm,
            bw_i + cost.recompute_s.selective + bw_comm,
            bw_i + cost.recompute_s.full + bw_comm + recompute_comm,
        )
        sent = cost.output_bytes / tp if tp > 1 and not sp else cost.output_bytes
        send = p2p_s(sent, link=plink) if c.num_stages > 1 else 0.0
        av = cost.activation_bytes
        params = cost.param_count
        if tied and shared_rank and is_head:
            params = max(0.0, params - word_params)
        expert = cost.expert_param_count
        z = c.zero_stage
        sb = static_bytes(params - expert, training=training, zero_stage=z, dp=dense_dp)
        if expert > 0:
            sb = sb.plus(static_bytes(expert, training=training, zero_stage=z, dp=edp))
        sync, step_bytes = gradient_terms(
            params,
            expert,
            training=training,
            zero_stage=z,
            dense_dp=dense_dp,
            edp=edp,
            links=folded,
            microbatches=m,
        )
        if tied and (first or is_head):
            sync += tied_sync_s
        opt = efficiency.memory_s(step_bytes, gpu)
        return (
            cost.fw_s + fw_comm,
            bw,
            bw_wt,
            send,
            (av.none, av.selective, av.full),
            sb,
            sync,
            opt,
        )

    # Layers of one kind share one LayerCost object (CostSource.layer_costs): their terms are
    # computed once per run of consecutive equal layers (a GPT's N blocks: one computation
    # and one list extension, not N).
    static_total: list[float] = []
    for start, count, is_head, first in _term_runs(src, costs):
        f, bw, bw_wt, send, av, sb, sync, opt = layer_terms(
            costs[start], is_head=is_head, first=first
        )
        fw += [f] * count
        bw_in += [bw] * count
        bw_w += [bw_wt] * count
        p2p += [send] * count
        act += [av] * count
        static += [sb] * count
        static_total += [sb.total_bytes] * count
        dps += [sync] * count
        opts += [opt] * count
        post += [sync + opt] * count

    boundary = max((p.output_bytes for p in costs[:-1]), default=0.0)
    full_act = boundary * tp if sp else boundary
    sent_boundary = boundary / tp if tp > 1 and not sp else boundary
    buffers = buffer_bytes(
        boundary_bytes=sent_boundary, full_activation_bytes=full_act, pp=pp, tp=tp
    )
    exchange = folded_buffer_bytes(costs, folded)
    if exchange:
        buffers += exchange
    allowed = request.constraints.recompute or RECOMPUTE_MODES
    loss = 0.0
    if memory_terms.loss_temporary and arch is not None and src.layers[-1].kind == HEAD:
        loss = loss_temporary_bytes(
            seq_length=training.seq_length // c.cp,
            micro_batch_size=c.micro_batch_size,
            vocab_size=arch.vocab_size,
            tp=tp,
        )
    inputs = PartitionInputs(
        schedule=c.schedule,
        pp=pp,
        vpp=c.vpp,
        num_microbatches=m,
        layer_names=_names(src),
        fw_s=tuple(fw),
        bw_input_s=tuple(bw_in),
        bw_weight_s=tuple(bw_w),
        p2p_s=tuple(p2p),
        activation_bytes=tuple(act),
        static_bytes=tuple(static_total),
        post_s=tuple(post),
        inflight=inflight,
        stage_rank=stage_rank,
        fixed_bytes=request.reserve_bytes + buffers,
        cap_bytes=float(request.memory_cap_bytes),
        allowed_modes=tuple(allowed),
        action_overhead=src.action_overhead,
        held_points=held,
        loss_bytes=loss,
        recompute_transient=memory_terms.recompute_transient,
        fragmentation_fraction=memory_terms.fragmentation_fraction,
    )
    terms = LayerTerms(
        candidate=c,
        costs=costs,
        static=tuple(static),
        dp_sync_s=tuple(dps),
        optimizer_s=tuple(opts),
        buffers_bytes=buffers,
        reserve_bytes=float(request.reserve_bytes),
    )
    return inputs, terms


def gradient_terms(
    params: float,
    expert: float,
    *,
    training: TrainingSpec,
    zero_stage: int,
    dense_dp: int,
    edp: int,
    links: FoldedLinks,
    microbatches: int,
) -> tuple[float, float]:
    """(DP gradient sync seconds, optimizer step HBM bytes) of one layer of `params`
    parameters, `expert` of them the routed experts': the dense ones reduced and sharded over
    dense_dp (dp x cp) on links.dense_grad, the experts' over edp on links.expert_grad
    (planner.cost.memory.dp_sync_s, optimizer_step_bytes). Without the tied embedding's
    all-reduce, which build_inputs adds on the two ranks that hold a copy. Each is
    nondecreasing in `params` at a fixed `expert`."""
    parts = [(params - expert, dense_dp, links.dense_grad)]
    if expert > 0:
        parts.append((expert, edp, links.expert_grad))
    sync, step_bytes = 0.0, 0.0
    for count, group, link in parts:
        sync += dp_sync_s(
            count,
            training=training,
            zero_stage=zero_stage,
            dp=group,
            link=link,
            microbatches=microbatches,
        )
        step_bytes += optimizer_step_bytes(
            count, training=training, zero_stage=zero_stage, dp=group
        )
    return sync, step_bytes


def _term_runs(
    src: CostSource, costs: tuple[LayerCost, ...]
) -> tuple[tuple[int, int, bool, bool], ...]:
    """(first layer, count, is the head, is the first layer) of each run of consecutive layers
    with the same LayerCost object; kept per cost point (the sweep builds thousands of
    inputs; `costs` is the source's own cached tuple, alive as long as the source)."""
    per_source = _RUNS.get(src, dict)
    runs = per_source.get(id(costs))
    if runs is None:
        runs = per_source[id(costs)] = _term_runs_of(src, costs)
    return runs


def _term_runs_of(
    src: CostSource, costs: tuple[LayerCost, ...]
) -> tuple[tuple[int, int, bool, bool], ...]:
    n = len(costs)
    keys = [
        (id(cost), src.layers[i].kind == HEAD and i == n - 1, i == 0)
        for i, cost in enumerate(costs)
    ]
    out = []
    start = 0
    for key, run in itertools.groupby(keys):
        count = len(list(run))
        out.append((start, count, key[1], key[2]))
        start += count
    return tuple(out)


def _names(src: CostSource) -> tuple[str, ...]:
    return _NAMES.get(src, lambda: tuple(layer.name for layer in src.layers))


_RUNS: PerObject[dict[int, tuple[tuple[int, int, bool, bool], ...]]] = PerObject()
_NAMES: PerObject[tuple[str, ...]] = PerObject()


def partition_inputs(
    request: PlanRequest,
    candidate: Candidate,
    *,
    source: CostSource | None = None,
    efficiency: Efficiency | None = None,
    given_inflight: Callable[[int, int], int] | None = None,
) -> PartitionInputs:
    """The per-layer numbers that score any partition of this candidate's configuration.

    The candidate is checked first (planner.cost.candidate.check_candidate); its stages do not
    matter here. Pass `source` (from `resolve_costs`) to reuse its cache across candidates,
    and `given_inflight` (see build_inputs) to skip generating the schedule.
    """
    inputs, _ = build_inputs(
        request,
        candidate,
        source=source,
        efficiency=efficiency,
        given_inflight=given_inflight,
        fill_stages=False,
    )
    return inputs
