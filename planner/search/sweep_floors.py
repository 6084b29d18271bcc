"""The sweep's floors of whole groups of configurations, and the order it visits them in.

A group (space.enumerate_groups) shares tp, pp, dp, mbs, ZeRO, cp, cp_comm, ep, etp, sp and
its recompute modes; its members differ in schedule and vpp. Every floor here is a lower bound
of the step time (or the memory, or the bubble) of every member of a group, valid for every
partition of each, so a group whose floor reaches the incumbent, or whose memory floor is over
the cap, is settled without a solve, and an unswept group's floor is a valid term of the
search's lower bound (docs/search.md, "Gap and status"). From the cheapest to the tightest:

- `coarse_floor` (one evaluation per (tp, mbs, sp, cp)), `expert_floor` (per (tp, mbs, sp, cp,
  ep, etp)), `work_floor` (per work kind): max(m W / pp, C) from the layer costs and links
  alone (planner.search.kinds); `shared_floor`, `fields_floor` and `known_time_floor` read
  those already computed, without calling the cost model;
- `post_floor` adds the average post time; `group_floors` (and its time part,
  `group_floors_time`) build the PartitionInputs of one or two representatives and take
  bounds.group_memory_floor_bytes and bounds.group_time_floor_s;
- `kind_memory_floor` (kinds.kind_memory_floor_bytes per memory key) with `over_cap`, and
  objective bubble's `group_edge_floor` (bubble_floor.group_bubble_floor per kind and modes).

The values are kept in the search's Outcome (coarse_kinds, expert_kinds, work_kinds,
memory_kinds, post_kinds, edge_kinds, edge_sums, shared_floors, partial_floors, group_keys),
one per key for the whole search. `least_first` spends a cut's time on the unswept groups that hold
the bound, best first; `sweep_order` orders the groups (which only decides what is seen
first, never what is pruned).
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from planner.cost import partition_inputs
from planner.cost.partition import SPLIT_BACKWARD
from planner.cost.source import CostSource
from planner.errors import SpecError
from planner.search.bounds import (
    group_memory_floor_bytes,
    group_time_floor_s,
    least_inflight,
    restricted,
)
from planner.search.bubble_floor import edge_sum, edge_terms, group_bubble_floor
from planner.search.kinds import (
    FloorFields,
    MemoryKey,
    coarse_key,
    coarse_work,
    expert_key,
    expert_work,
    floor_fields,
    group_memory_key,
    group_post_key,
    kind_key,
    kind_memory_floor_bytes,
    kind_post_floor_s,
    kind_work,
    memory_key,
)
from planner.search.outcome import Outcome, bubble_closed
from planner.search.space import Config
from planner.specs.request import PlanRequest


def coarse_floor(
    request: PlanRequest,
    src: CostSource,
    out: Outcome,
    members: list[Config],
    *,
    known: bool = False,
) -> float | None:
    """A time floor of every configuration of a group from its (tp, mbs, sp, cp) alone:
    max(m W / pp, C) with W and C kinds.coarse_work's floors of every work kind under that
    key (kept in `out.coarse_kinds`), so at most work_floor's. One evaluation serves every
    group of the key, whatever its pp, dp, ZeRO, ep, etp or cp_comm (the members of a group
    share tp, mbs, sp, cp, m and pp). None if the key has no costs, or, with `known`, if
    it was never evaluated."""
    cfg = members[0]
    key = coarse_key(cfg)
    return _kept_floor(cfg, out.coarse_kinds, key, lambda: coarse_work(request, src, key), known)


def expert_floor(
    request: PlanRequest,
    src: CostSource,
    out: Outcome,
    members: list[Config],
    *,
    known: bool = False,
) -> float | None:
    """A time floor of every configuration of a group of ep > 1 from its (tp, mbs, sp, cp,
    ep, etp): max(m W / pp, C) with W and C kinds.expert_work's floors (kept in
    `out.expert_kinds`): the coarse floor's terms plus the expert all-to-alls, so between
    coarse_floor's and work_floor's. None at ep = 1 (it adds nothing to the coarse floor
    there), where the key has no costs, or, with `known`, where it was never evaluated."""
    cfg = members[0]
    if cfg.ep == 1:
        return None
    key = expert_key(cfg)
    return _kept_floor(cfg, out.expert_kinds, key, lambda: expert_work(request, src, cfg), known)


def _kept_floor(
    cfg: Config,
    kept: dict[Any, tuple[float, float] | None],
    key: object,
    work: Callable[[], tuple[float, float]],
    known: bool,
) -> float | None:
    """max(m W / pp, C) of cfg's group from the (W, C) kept under `key` in `kept` (_kept);
    None where there are none, or, with `known`, where `key` was never computed."""
    wc = _kept(kept, key, work, known=known)
    if wc is None:
        return None
    return max(cfg.num_microbatches * wc[0] / cfg.pp, wc[1])


_T = TypeVar("_T")


def _kept(
    kept: dict[Any, _T | None], key: object, compute: Callable[[], _T], *, known: bool = False
) -> _T | None:
    """What `kept` holds under `key`, computed by `compute` on first use: one value per key
    for the whole search (out.coarse_kinds, expert_kinds, memory_kinds, post_kinds), None
    kept where the cost source has no costs there; with `known`, None where `key` was never
    computed (nothing is computed)."""
    if key not in kept:
        if known:
            return None
        try:
            kept[key] = compute()
        except (SpecError, ValueError):
            kept[key] = None
    return kept[key]


def work_floor(
    request: PlanRequest,
    src: CostSource,
    out: Outcome,
    members: list[Config],
    *,
    known: bool = False,
) -> float | None:
    """A time floor of every configuration of an unswept group, cheap enough for thousands:
    bounds.time_floor_s's first two terms, the average busy time m W / pp and micro-batch 0's
    chain, without the post term. W and the chain depend on (tp, mbs, sp), the folded degrees
    (cp, cp_comm, ep, etp) and on whether the schedule splits the backward
    (LayerCost.split_costs), not on pp, dp or ZeRO, so one (W, C) per such kind serves every
    group (kept in `out.work_kinds`), computed from the layer costs and links without building
    the PartitionInputs (planner.search.kinds). The members of a group share m and pp, so
    each of its (at most two) kinds is evaluated once. None if the cost source has costs for
    no member, or, with `known`, if a member's kind was never computed (its floor is then
    not known without calling the cost model)."""
    floors = []
    # the members share tp, mbs, sp and the folded degrees (the group's key): their kinds
    # differ in the split backward alone, so there are at most two
    seen: set[bool] = set()
    for cfg in members:
        if len(seen) == 2:
            break
        split = cfg.schedule in SPLIT_BACKWARD
        if split in seen:
            continue
        seen.add(split)
        folded = (cfg.cp, cfg.cp_comm, cfg.ep, cfg.etp)
        key = (cfg.tp, cfg.micro_batch_size, cfg.sequence_parallel, split, *folded)
        if key not in out.work_kinds:
            if known:
                return None  # a floor of some members only is not a floor of the group
            try:
                out.work_kinds[key] = kind_work(request, src, cfg)  # no inputs built
            except (SpecError, ValueError):
                continue  # no costs at this point
        work, chain = out.work_kinds[key]
        floors.append(max(cfg.num_microbatches * work / cfg.pp, chain))
    return min(floors) if floors else None


def shared_floor(
    request: PlanRequest, src: CostSource, out: Outcome, members: list[Config]
) -> float:
    """The greater of the group's coarse and expert floors where known, 0 where neither is.
    Once both are known (or the coarse one, at ep = 1), kept in out.shared_floors under the
    group's floor_fields, which they read alone: the known-floor scans of the ~300,000
    unswept groups of DeepSeek-V3 on 2,048 GPUs then cost a lookup each. Before, what is
    known is kept in out.partial_floors with the number of coarse and expert floors kept
    then, and read while that number is the same (those dicts only grow: no floor of the
    group was computed since)."""
    fields = group_keys(out, members)[0]
    kept = out.shared_floors.get(fields)
    if kept is not None:
        return kept
    stamp = len(out.coarse_kinds) + len(out.expert_kinds)
    partial = out.partial_floors.get(fields)
    if partial is not None and partial[1] == stamp:
        return partial[0]
    coarse = coarse_floor(request, src, out, members, known=True)
    expert = expert_floor(request, src, out, members, known=True)
    floor = max(coarse or 0.0, expert or 0.0)
    cfg = members[0]
    if coarse_key(cfg) in out.coarse_kinds and (cfg.ep == 1 or expert_key(cfg) in out.expert_kinds):
        out.shared_floors[fields] = floor
    else:
        out.partial_floors[fields] = (floor, stamp)
    return floor


def fields_floor(out: Outcome, fields: FloorFields) -> float:
    """shared_floor of the groups of `fields` from the coarse and expert floors kept (none
    computed): max(m W / pp, C) of each where known (_kept_floor), the greater; 0 if
    neither is."""
    m, pp = fields[6], fields[7]
    floor = 0.0
    for kept in (out.coarse_kinds.get(fields[:4]), out.expert_kinds.get(fields[:6])):
        if kept is not None:  # (the expert floor is kept at ep > 1 only)
            floor = max(floor, m * kept[0] / pp, kept[1])
    return floor


def known_time_floor(
    request: PlanRequest, src: CostSource, out: Outcome, members: list[Config]
) -> float:
    """The best time floor of an unswept group among those already computed: its own work
    floor (out.pending_floors), its coarse and expert floors; 0 if none is."""
    own = out.pending_floors.get(id(members)) or 0.0
    return max(own, shared_floor(request, src, out, members))


def group_keys(out: Outcome, members: list[Config]) -> tuple[FloorFields, MemoryKey]:
    """`members`' floor_fields and group_memory_key: kept for every enumerated group by
    sweep_order (the close's settlements and bound read them for every unswept group:
    ~275,000 on DeepSeek-V3 on 2,048 GPUs, where building the keys again cost more than the
    finish slack), computed for any other (the rest of a big group the sweep cut inside).
    Kept by id: the enumerated groups stay alive for the whole search (the sweep's order
    holds them), so no other list alive beside them has one of their ids. The keys hold
    atoms only, which the garbage collector stops tracking."""
    kept = out.group_keys.get(id(members))
    if kept is not None:
        return kept
    return floor_fields(members[0]), group_memory_key(members)


def kind_memory_floor(
    request: PlanRequest, src: CostSource, out: Outcome, members: list[Config], *, known: bool
) -> float | None:
    """kinds.kind_memory_floor_bytes of the group's memory_key, kept in out.memory_kinds (at
    most group_memory_floor_bytes of every member); None where the cost source has no costs,
    or, with `known`, where the key's floor was never computed."""
    key = group_keys(out, members)[1]
    kept = out.memory_kinds
    if key in kept:  # (a lookup for most calls: the close's for every unswept group)
        return kept[key]
    floor = partial(kind_memory_floor_bytes, request, src, members[0], shared=key[-1])
    return _kept(kept, key, floor, known=known)


def post_floor(
    request: PlanRequest, src: CostSource, out: Outcome, members: list[Config]
) -> float | None:
    """kinds.kind_post_floor_s of the group's post key, kept in out.post_kinds: at most
    sum(post_s) of every member's PartitionInputs, so the group's time floor is at least
    max(m W / pp, C) + this / pp (bounds.group_time_floor_s' first terms) without building
    them; None where the cost source has no costs."""
    key = group_post_key(members)
    floor = partial(kind_post_floor_s, request, src, members[0], shared=key[-1])
    return _kept(out.post_kinds, key, floor)


def over_cap(request: PlanRequest, floor: float) -> bool:
    """A kind memory floor above the cap: its sums run in another order than the built
    inputs', and a relative 1e-9 above the cap is far beyond their rounding."""
    return floor > request.memory_cap_bytes * (1 + 1e-9)


def group_floors(
    request: PlanRequest,
    src: CostSource,
    members: list[Config],
    enough_s: float | None = None,
    *,
    memory_only: bool = False,
) -> tuple[float, float] | None:
    """Schedule-independent (memory, time) floors of configurations sharing (tp, pp, dp, mbs,
    ZeRO, cp, cp_comm, ep, etp, sp, modes), from one or two representatives (zbv puts the
    first and last stage on one rank, which changes a tied head's bytes, so it gets its own).
    A time floor at or above `enough_s` may be returned before its costliest part
    (group_time_floor_s); with `memory_only`, a group over the cap gets only the cheap part
    (group_time_floor computes the rest if explain asks)."""
    # Either floor is the same for every member of its kind (tests/planner/search/
    # test_group_floor.py), so the smallest vpp represents the non-split-backward ones.
    # A measured profile may give split-backward schedules (zb-h1, zbv) their own I and W
    # times (LayerCost.split_costs), so zb-h1 is its own kind too: the group's floor is the
    # least over the kinds present.
    # Without split costs zb-h1's PartitionInputs equal 1f1b's (same ranks, times and bytes),
    # so the plain representative stands for it.
    plain = [c for c in members if c.schedule not in SPLIT_BACKWARD]
    first = members[0]
    split = src.split_backward_differs(
        micro_batch_size=first.micro_batch_size,
        tp=first.tp,
        sequence_parallel=first.sequence_parallel,
    )
    reps = [
        min(plain, key=lambda c: c.vpp) if plain else None,
        next((c for c in members if c.schedule == "zb-h1"), None) if split or not plain else None,
        next((c for c in members if c.schedule == "zbv"), None),
    ]
    built = []
    for rep in reps:
        if rep is None:
            continue
        # The group floors use only closed-form in-flight counts (bounds.group_inflight), so
        # the representative's schedule is never generated.
        least = least_inflight(rep.schedule, rep.pp, rep.num_microbatches)
        try:
            rin = partition_inputs(request, rep.candidate(), source=src, given_inflight=least)
        except SpecError:
            continue
        rin = restricted(rin, rep.modes)
        built.append((group_memory_floor_bytes(rin), rin))
    if not built:
        return None
    memory = min(mem for mem, _ in built)
    if memory_only and memory > request.memory_cap_bytes:
        return memory, min(group_time_floor_s(rin, 0.0) for _, rin in built)
    # each rank's drain (bounds.rank_edges) only where no member splits its backward: the plain
    # representative also stands for zb-h1 without split costs
    drain = len(plain) == len(members)
    times = []
    for _, rin in built:
        times.append(group_time_floor_s(rin, enough_s, drain=drain))
        if memory <= request.memory_cap_bytes and enough_s is not None and times[-1] < enough_s:
            break  # the group is neither memory- nor time-pruned: the other floors do not matter
    # (a memory-pruned group's time floor explains what memory cost: planner.search.explain)
    return memory, min(times)


def group_floors_time(
    request: PlanRequest, src: CostSource, members: list[Config], enough: float
) -> float | None:
    """The time part of group_floors (valid for every member; one at or above `enough`
    may stop short of its whole-layer floors)."""
    floors = group_floors(request, src, members, enough)
    return floors[1] if floors is not None else None


def group_edge_floor(
    request: PlanRequest, src: CostSource, out: Outcome, members: list[Config], *, known: bool
) -> float | None:
    """Objective bubble: a bubble floor of every member of a group, the least of each
    member's bubble_floor.group_bubble_floor over the EdgeTerms of its kind and modes (the
    layers' times of a kind are the same in every configuration, planner.search.kinds; p2p
    left out, which is valid), one PartitionInputs per (kind, modes) (out.edge_kinds) and one
    sum of rank edges per (kind, modes, pp, drain) (out.edge_sums: a group's members differ
    in schedule and vpp, and groups in dp and ZeRO, which the edges do not read). With
    `known`, or where a kind's inputs cannot be built, only what is known: None unless every
    kind's terms are."""
    least = math.inf
    for cfg in members:
        key = (*kind_key(cfg), cfg.modes)
        if key not in out.edge_kinds:
            if known:
                return None
            least_in = least_inflight(cfg.schedule, cfg.pp, cfg.num_microbatches)
            try:
                rin = partition_inputs(
                    request, cfg.candidate(), source=src, given_inflight=least_in
                )
            except SpecError:
                return None  # a member the cost model refuses: no floor claimed for it
            out.edge_kinds[key] = edge_terms(restricted(rin, cfg.modes), hop=False)
        terms = out.edge_kinds[key]
        drain = cfg.schedule not in SPLIT_BACKWARD
        edges = None
        if terms is not None and cfg.pp > 1:
            at = (key, cfg.pp, drain)
            edges = out.edge_sums.get(at)
            if edges is None:
                edges = out.edge_sums[at] = edge_sum(terms, pp=cfg.pp, drain=drain)
        floor = group_bubble_floor(
            terms,
            pp=cfg.pp,
            m=cfg.num_microbatches,
            drain=drain,
            max_stages=cfg.pp * cfg.vpp,
            edges=edges,
        )
        least = min(least, floor)
    return least if least < math.inf else None


def least_first(
    request: PlanRequest, src: CostSource, out: Outcome, limit: float, enough: float
) -> None:
    """Best first, the unswept groups below `enough` by their known time floor
    (known_time_floor): the least one gets, one per turn, its expert floor
    (expert_floor), its kind memory floor (over the cap: the close settles it), its work
    floor (work_floor) and its group time floor (group_floors_time), the last two kept in
    out.pending_floors as driver._pending_floor keeps a group's floor (its floor from then on), and
    goes back in the queue at its floor after each. The first group that comes out of the
    queue with all four known, none settling it, holds the bound of
    the unswept groups (every other one's floor is at least its own), and the pass stops
    there, or at `limit`.

    The groups enter the queue by floor_fields, one entry per value shared by many groups
    (DeepSeek-V3 on 2,048 GPUs: ~300,000 groups at the first cut), at their coarse floor
    (the same for each): the entry's expert floor is computed once for all of them, and only
    when it comes out are its groups queued one by one, each at its own known floor (at least
    the shared one: a queue key is never above the floor it stands for, so the order and the
    stop stay those of a queue of the groups themselves)."""
    shared: dict[tuple[object, ...], list[int]] = {}
    for i, members in enumerate(out.pending):
        shared.setdefault(group_keys(out, members)[0], []).append(i)
    heap: list[tuple[float, int, int]] = []
    for indices in shared.values():
        first = out.pending[indices[0]]
        if bubble_closed(request, out, first[0].pp):  # settled whatever its floors
            continue
        floor = coarse_floor(request, src, out, first, known=True) or 0.0
        if floor < enough:
            heap.append((floor, indices[0], -1))
    heapq.heapify(heap)
    while heap and out.now() < limit:
        floor, i, turn = heapq.heappop(heap)
        members = out.pending[i]
        if turn == -1:  # every group of members' floor_fields, at their expert floor
            floor = max(floor, expert_floor(request, src, out, members) or 0.0)
            for j in shared[group_keys(out, members)[0]]:
                known = max(floor, out.pending_floors.get(id(out.pending[j])) or 0.0)
                if known < enough:
                    heapq.heappush(heap, (known, j, 1))
            continue
        if turn == 1:
            memory = kind_memory_floor(request, src, out, members, known=False)
            if memory is not None and over_cap(request, memory):
                continue
        elif turn in (2, 3):
            # the kinds' work floor, then the group's own (its representatives' inputs)
            own = (
                work_floor(request, src, out, members)
                if turn == 2
                else group_floors_time(request, src, members, enough)
            )
            if own is not None:
                floor = max(floor, own)
                out.pending_floors[id(members)] = floor
        else:
            return
        if floor < enough:
            heapq.heappush(heap, (floor, i, turn + 1))


def sweep_order(
    request: PlanRequest, src: CostSource, out: Outcome, groups: list[list[Config]]
) -> list[list[Config]]:
    """The order the sweep visits groups in. It decides only what is seen first (how soon a
    good incumbent prunes the rest), never what is pruned: that is the floors' work. Every
    group's keys are kept in out.group_keys on the way (group_keys).

    Objective time: by an estimate of the step time, the group's coarse floor (coarse_floor:
    one cost evaluation per (tp, mbs, sp, cp), a few hundred at most, each needed by the
    sweep's first check of its groups anyway) times 1 + the least bubble share of its
    members' schedules (bubble_share: 1F1B's (pp - 1) / m, Narayanan et al. 2021 §2.2.1,
    less for the interleaved and zero-bubble schedules). The floor alone ranks by work and
    ignores the bubble; the bubble share alone (the order below) ranks pp = 1 groups of any
    work first; 1F1B's bubble for every group swept the groups whose best member is zbv
    (310.1B's and 529.6B's winners) after many that cannot beat it. A group without costs
    comes last. The estimate reads the group's floor_fields and schedules alone, so it is
    computed once per such value (DeepSeek-V3 on 2,048 GPUs: 311,248 groups).

    Objective bubble and the exhaustive mode: the 1F1B bubble share (pp - 1) / (m + pp - 1)
    (no cost model; pp = 1 first, which driver._zero_bubble_to_prove relies on). Ties (and every
    group under the bubble order) then by tensor-parallel width, ZeRO-1 before 0."""
    by_time = request.objective == "time" and request.search.mode != "exhaustive"
    # (estimate, plain share, whether a member puts the ends on one rank) per fields and
    # members' schedules
    known: dict[tuple[FloorFields, tuple[str, ...]], tuple[float, float, bool]] = {}
    keys = out.group_keys
    ranked = []
    for i, ms in enumerate(groups):
        c = ms[0]
        fields = floor_fields(c)
        names = tuple(map(_SCHEDULE, ms))
        terms = known.get((fields, names))
        if terms is None:
            plain = (c.pp - 1) / (c.num_microbatches + c.pp - 1)
            estimate = 0.0
            if by_time:
                floor = coarse_floor(request, src, out, ms)
                # the share depends on the schedule, pp and m alone: one member per schedule
                per_schedule = dict(zip(names, ms, strict=True))
                share = min(map(bubble_share, per_schedule.values()))
                estimate = math.inf if floor is None else floor * (1 + share)
            shared = c.pp == 1 or "zbv" in names  # kinds.ends_share_rank
            terms = known[(fields, names)] = (estimate, plain, shared)
        keys[id(ms)] = (fields, memory_key(c, terms[2]))
        ranked.append((terms[0], terms[1], c.tp, c.zero_stage != 1, i))
    ranked.sort()  # the index last: ties keep the enumeration's order, as a stable sort
    return [groups[r[-1]] for r in ranked]


_SCHEDULE = operator.attrgetter("schedule")


def bubble_share(cfg: Config) -> float:
    """An estimate of the bubble of `cfg`'s schedule over its m micro-batches' work with
    uniform stages, for the sweep's order only: (pp - 1) / m for gpipe and 1F1B (Narayanan
    et al. 2021 §2.2.1); half that for interleaved 1F1B and zbv (ibid. §2.2.2: (pp - 1) /
    (v m) with v chunks per rank, taken at v = 2 whatever v is: more chunks add p2p and
    per-stage overhead that the coarse floor leaves out, and ranking the groups with many
    chunks by (pp - 1) / (v m) swept them before better ones); a third of it for zb-h1 (Qi
    et al. 2023 §3.1: (p - 1)(T_F + T_B - T_W) against 1F1B's (p - 1)(T_F + T_B + T_W),
    equal at T_F = T_B = T_W)."""
    share = (cfg.pp - 1) / cfg.num_microbatches
    if cfg.schedule in ("interleaved-1f1b", "zbv"):
        return share / 2
    if cfg.schedule == "zb-h1":
        return share / 3
    return share
