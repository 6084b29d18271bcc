"""The search over configurations: enumerate, bound, solve each survivor, keep the best.

Order of work (objective `time`): groups of configurations get schedule-independent floors, then
every configuration of a surviving group its PartitionInputs, a memory floor and a time floor
(planner.search.bounds); an improve pass runs every configuration's heuristics and hill climb
(lowest floor first) before any proof. Configurations whose memory floor exceeds the cap are
infeasible without a solve. The rest are solved by increasing heuristic step time (each capped
in a first pass); one whose floor reaches the incumbent's simulated step time is pruned.
Each visited configuration runs the exact loop of planner.search.exact with the incumbent as its
bound (so CP-SAT proves quickly that most cannot beat it), seeded with heuristic partitions.
Objective `bubble`: the partition of each configuration is its time-optimal one (among ties,
the pick of the tie rule, exact.tie_key); configurations are ranked by (bubble fraction, step
time), so only a proven time-optimal partition may be the incumbent, and none is pruned by
time until the incumbent's bubble is 0 (time_bound_s); before that, one whose bubble floor
(planner.search.bubble_floor) is above the incumbent's bubble is pruned (bubble_beaten).

Every result carries a proven lower bound and gap (`close_search`: the floors of the configurations
not settled) and, with search.top_k, the alternatives (`_alternatives`); docs/search.md, "Gap
and status". The tuned shares come from `tuning` (planner.search.tuning).

Time. The planning core reads no clock (with `cpu_clock`, only its CP-SAT solves' CPU clock:
model.solve_on_cpu). Without a `clock`, the budget is charged with the solvers' own wall time
of each solve (CP-SAT's; what we hand them as their time limit is what is left); the Python
work around it is not counted. Callers that can read the clock (CLI, service) pass
`clock=time.monotonic` and then the whole search is charged; with a CPU clock
(`clock=time.process_time`, `cpu_clock=True`) CP-SAT's solves are stopped and charged on CPU
time too (exact.SolveLimits.cpu_clock). Either way a search that runs out of time returns its
best plan so far marked FEASIBLE; if it has none yet, it keeps scoring heuristic partitions
(no CP-SAT) until one fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from planner.cost import (
    PartitionInputs,
    balanced_bounds,
    partition_inputs,
    resolve_costs,
)
from planner.cost.partition import SPLIT_BACKWARD
from planner.cost.source import CostSource
from planner.errors import SpecError
from planner.search.bounds import (
    cut_floor_s,
    memory_floor_bytes,
    restricted,
    time_floor_s,
)
from planner.search.bubble_floor import bubble_floor, edge_terms, group_bubble_floor
from planner.search.domains import Domains, intersect
from planner.search.dominance import mark_dominated, mark_same_costs
from planner.search.exact import (
    REL_TOL,
    Known,
    Scored,
    SolveLimits,
    improve_config,
    solve_config,
)
from planner.search.exhaustive import exhaustive_config
from planner.search.hints import hint_partitions, quick_partition, quick_partitions
from planner.search.kinds import (
    FloorFields,
    coarse_key,
)
from planner.search.model import StageSplit
from planner.search.outcome import Entry, MemoryGroup, Outcome, bubble_closed, time_bound_s
from planner.search.partition import Partition, score
from planner.search.progress import SearchProgress
from planner.search.space import (
    Config,
    enumerate_groups,
    freeze_alive,
    frozen_for_gc,
    main_run,
    no_gc,
    split_ok,
    stage_split,
)
from planner.search.sweep_floors import (
    coarse_floor,
    expert_floor,
    fields_floor,
    group_edge_floor,
    group_floors,
    group_keys,
    kind_memory_floor,
    known_time_floor,
    least_first,
    over_cap,
    post_floor,
    sweep_order,
    work_floor,
)
from planner.search.tuning import TUNING, SearchTuning
from planner.specs.request import PlanRequest


def group_time_floor(
    request: PlanRequest, out: Outcome, group: MemoryGroup, enough_s: float | None = None
) -> float:
    """A memory-pruned group's time floor (what memory cost, for explain). The sweep keeps
    only its cheap part (the whole-layer floors of every such group, most of them
    memory-bound, are work no prune needs); the rest is computed here when asked (a value
    at or above `enough_s` may stay partial)."""
    if group.cheap:
        src = out.source if out.source is not None else resolve_costs(request)
        floors = group_floors(request, src, group.members, enough_s)
        if floors is not None:
            group.time_floor_s = max(group.time_floor_s, floors[1])
        group.cheap = enough_s is not None and group.time_floor_s >= enough_s
    return group.time_floor_s


def _rank(request: PlanRequest, sc: Scored) -> tuple[float, float]:
    if request.objective == "bubble":
        return (sc.score.bubble_fraction, sc.score.step_time_s)
    return (sc.score.step_time_s, 0.0)


def entry_bubble_floor(out: Outcome, entry: Entry) -> float:
    """A lower bound of the bubble fraction of every partition of the configuration
    (planner.search.bubble_floor), computed once per entry."""
    if entry.bubble_floor is None:
        rounds = out.tuning.bubble_floor_rounds
        entry.bubble_floor = bubble_floor(entry.inputs, entry.config.modes, rounds=rounds)
    return entry.bubble_floor


def bubble_beaten(
    request: PlanRequest, out: Outcome, entry: Entry, *, compute: bool = False
) -> bool:
    """Objective bubble: every partition of the configuration has a larger bubble than the
    incumbent's (its bubble floor is above it), so it ranks below the incumbent whatever its
    step time (configurations are ranked by (bubble, step time)). The floor is computed only
    with `compute` (a visit, which it may spare a solve); otherwise only a floor computed
    already counts (the progress reports and the bound scan every entry: on Llama 3 405B
    under megatron thousands, with 128-stage schedules)."""
    best = out.best
    if (
        request.objective != "bubble"
        or request.search.mode == "exhaustive"
        or best is None
        or entry.config.pp == 1
    ):
        return False
    floor = entry_bubble_floor(out, entry) if compute else entry.bubble_floor
    return max(floor or 0.0, entry_edge_floor(entry)) > best[1].score.bubble_fraction


def entry_edge_floor(entry: Entry) -> float:
    """The closed-form bubble floor of the configuration (bubble_floor.group_bubble_floor of
    its own inputs: every partition's bubble is at least it), computed once per entry."""
    if entry.edge_floor is None:
        cfg = entry.config
        terms = edge_terms(restricted(entry.inputs, cfg.modes))
        drain = cfg.schedule not in SPLIT_BACKWARD
        entry.edge_floor = group_bubble_floor(
            terms, pp=cfg.pp, m=cfg.num_microbatches, drain=drain, max_stages=cfg.pp * cfg.vpp
        )
    return entry.edge_floor


def _positive_bubble(request: PlanRequest, out: Outcome) -> float | None:
    """Objective bubble with a proven incumbent of positive bubble: that bubble, else None."""
    best = out.best
    if request.objective != "bubble" or request.search.mode == "exhaustive" or best is None:
        return None
    bubble = best[1].score.bubble_fraction
    return bubble if bubble > 0.0 else None


def run_search(
    request: PlanRequest,
    *,
    on_progress: Callable[[SearchProgress], None] | None = None,
    clock: Callable[[], float] | None = None,
    cpu_clock: bool = False,
    tuning: SearchTuning = TUNING,
) -> Outcome:
    """Search `request`'s space (module docstring); `tuning` shares the time limit and bounds
    each phase (planner.search.tuning); `cpu_clock`: `clock` counts CPU time (module
    docstring, "Time")."""
    start = clock() if clock is not None else 0.0  # the enumeration is charged too
    src = resolve_costs(request)
    groups = enumerate_groups(request, num_layers=len(src.layers))
    with frozen_for_gc():
        return _search(request, src, groups, start, on_progress, clock, cpu_clock, tuning)


def _search(
    request: PlanRequest,
    src: CostSource,
    groups: list[list[Config]],
    start: float,
    on_progress: Callable[[SearchProgress], None] | None,
    clock: Callable[[], float] | None,
    cpu_clock: bool,
    tuning: SearchTuning,
) -> Outcome:
    """run_search on the enumerated `groups`, its clock started at `start`."""
    num_layers = len(src.layers)
    split = stage_split(request)
    # The exhaustive oracle shares no bound with the optimal mode: nothing is pruned.
    prune = request.search.mode != "exhaustive"
    num_configs = sum(map(len, groups))
    out = Outcome(entries=[], best=None, status="OPTIMAL", source=src, num_configs=num_configs)
    out.tuning, out.cpu_clock = tuning, cpu_clock
    solver_s = 0.0

    def elapsed() -> float:
        return clock() - start if clock is not None else solver_s

    out.now = elapsed
    report = _Reporter(request, out, on_progress)

    # (one key tuple per group, no reference cycles: a collection would only scan the
    # search's objects again, and everything alive then stays out of later scans)
    with no_gc():
        ordered = sweep_order(request, src, out, groups)
    freeze_alive()
    # Work that no limit interrupts (a CP-SAT or LP model built, a group's floors) may run
    # past the moment it was begun in: new work stops tuning.reserve_share (at most
    # tuning.reserve_s) before the limit.
    limit = request.search.time_limit_s
    limit -= min(tuning.reserve_s, tuning.reserve_share * limit)
    out.pending = ordered
    share = tuning.sweep_share * limit
    cap = max(tuning.config_min_s, tuning.config_share * limit)  # one configuration, first pass

    def done() -> bool:
        """The time is up, or the proven gap is within search.gap_tolerance."""
        report()
        return elapsed() >= limit or _gap_reached(request, out)

    while True:
        first_new = len(out.entries)
        out.pending = _sweep(request, out, src, out.pending, prune, report, share)
        if out.pending:  # cut short: every unswept group gets its coarse floor now
            _coarse_floors_of(request, src, out, limit)
            _edge_floors_of(request, src, out, limit)
            _memory_floors_of(request, src, out, limit)
            _pending_floor(request, out, sweep=False, fresh=True)  # for progress reports
        if prune:
            (mark_dominated if request.objective == "time" else mark_same_costs)(out.entries)
        # Exact phase: the most promising configurations first (by their heuristic step time);
        # the floors still decide what is pruned, so the order only affects speed.
        fresh = out.entries[first_new:]
        if prune and request.objective == "time" and not _gap_reached(request, out):
            # Improve pass: the heuristics and hill climb of each configuration, lowest floor
            # first, before any proof: the incumbent it finds lets the floors prune most of
            # the rest (a winner whose hill climb is quick may come, by heuristic estimate,
            # after many configurations whose proofs are slow and settle nothing).
            share_left = _capped(elapsed, limit, tuning.improve_share * (limit - elapsed()))
            for entry in sorted(fresh, key=lambda e: (e.time_floor_s, e.estimate_s)):
                if share_left() <= 0 or _gap_reached(request, out, throttle=True):
                    break
                _improve(request, out, entry, split, num_layers, share_left)
            # Then the incumbent's configuration: its cutting planes (they often beat the hill
            # climb there) and polish, so the proofs meet a better one; no proof yet (a better
            # configuration may come, against which it is cheaper): unless a floor settled
            # it, it waits for the first pass with the cuts and domains it found. Only the
            # final incumbent gets this visit: an earlier one's is wasted when a later
            # configuration beats it.
            best = out.best
            if best is not None and any(e is best[0] for e in fresh):
                entry = best[0]
                solver_s += _visit(
                    request,
                    out,
                    entry,
                    split,
                    num_layers,
                    _capped(elapsed, limit, cap),
                    prove=False,
                    polish=True,
                )
                if entry.result is not None and _unproven(entry):
                    _reopen(entry)
        # Objective bubble: pp = 1 configurations first (no pipeline, no bubble), whose
        # zero-bubble incumbent settles every pp > 1 one (bubble_closed).
        bubble_first = request.objective == "bubble"
        fresh = sorted(
            fresh,
            key=lambda e: (bubble_first and e.config.pp > 1, e.estimate_s, e.time_floor_s),
        )
        # Settle pass: configurations no heuristic partition fits come last by estimate, and
        # most have nothing that fits (their LP with the memory rows is infeasible: settled in
        # one solve); unvisited, they would hold the bound. Each gets the cheap phases (no
        # branching, no CP-SAT) within tuning.settle_share of the first pass's cap.
        if prune and request.objective == "time":
            for entry in [e for e in fresh if e.estimate_s == math.inf]:
                if elapsed() >= limit or _gap_reached(request, out, throttle=True):
                    break
                own = _capped(elapsed, limit, tuning.settle_share * cap)
                solver_s += _visit(request, out, entry, split, num_layers, own, prove=False)
                if entry.result is not None and _unproven(entry):
                    _reopen(entry)
        # First pass: each configuration gets at most config_share of the limit, so that one
        # hard proof cannot starve the rest; those cut short are solved again with all the
        # time left (and the better incumbent the first pass found).
        capped = []
        # The configuration of the incumbent gets incumbent_cap x the share: it must be proven
        # whatever comes, and a capped proof is redone in the second pass.
        far_done = False
        interim = _interim_gap(request, tuning)
        queue = list(reversed(fresh))
        while queue:
            entry = queue.pop()
            if _gap_reached(request, out, throttle=True):
                break
            if not far_done and elapsed() >= tuning.far_share * limit:
                far_done = True
                solver_s += _far_pass(request, out, fresh, split, num_layers, limit, cap)
                if request.objective == "time":
                    # the rest lowest floor first: what holds the bound when time runs out
                    queue.append(entry)
                    queue.sort(key=lambda e: (e.floor_s, e.estimate_s), reverse=True)
                    entry = queue.pop()
                if entry.verdict != "pending" and not _unproven(entry):
                    continue
            mine = out.best is not None and out.best[0] is entry
            own = _capped(elapsed, limit, tuning.incumbent_cap * cap if mine else cap)
            # past the far pass, the interim bound (the first pass will not end in time)
            level = interim if far_done and not mine else 0.0
            if level and not _below_interim(request, out, entry):
                if entry.verdict == "pending" or _unproven(entry):
                    capped.append(entry)  # at the interim bound already: the second pass's
                continue
            solver_s += _visit(request, out, entry, split, num_layers, own, interim=level)
            report()
            if (_unproven(entry) or entry.verdict == "pending") and elapsed() < limit:
                capped.append(entry)  # its share ran out, not the search's time
        if request.objective == "time":
            capped.sort(key=lambda e: (e.floor_s, e.estimate_s))
        if far_done and interim:
            solver_s += _interim_pass(request, out, capped, split, num_layers, limit, cap)
        for entry in capped:
            if elapsed() < limit and not _gap_reached(request, out, throttle=True):
                _reopen(entry)
                solver_s += _visit(
                    request, out, entry, split, num_layers, lambda: limit - elapsed()
                )
                report()
        if not out.pending or done():
            break
        # Time is left: sweep the groups the share cut off (the incumbent now prunes most of
        # them), again leaving part of what is left to their exact phase.
        share = elapsed() + tuning.sweep_share * tuning.resweep_factor * (limit - elapsed())
    if out.best is None and out.provisional is not None:
        out.best = out.provisional  # objective bubble, no configuration proven in time
    if prune:
        budget = _capped(elapsed, request.search.time_limit_s, tuning.alternatives_share * limit)
        _alternatives(request, out, num_layers, budget)
    close_search(request, out)
    out.skipped += sum(len(ms) for ms in out.pending)
    out.elapsed_s = elapsed()
    report(final=True)
    return out


def settled(request: PlanRequest, out: Outcome, entry: Entry) -> bool:
    """Nothing of this configuration can beat the incumbent: solved to the end, pruned by a
    floor (memory, time, dominance)."""
    if entry.verdict in ("dominated", "memory", "pruned"):
        return True
    if entry.verdict == "solved" and not _unproven(entry):
        return True
    if request.search.mode != "exhaustive" and entry.memory_floor_bytes > entry.inputs.cap_bytes:
        return True
    if bubble_closed(request, out, entry.config.pp) or bubble_beaten(request, out, entry):
        return True
    bound = time_bound_s(request, out)
    return bound is not None and entry.floor_s >= bound * (1 - REL_TOL)


def _open_floors(request: PlanRequest, out: Outcome, *, sweep: bool) -> list[float] | None:
    """The floors of every configuration not settled: the entries', then the least floor of
    the unswept groups (_pending_floor); None when an unswept group has no floor yet (only
    without `sweep`)."""
    floors = _entry_floors(request, out)
    if not out.pending:
        return floors
    least = _pending_floor(request, out, sweep=sweep)
    if least is None:
        return None
    if least < math.inf:
        floors.append(least)
    return floors


def _pending_floor(
    request: PlanRequest, out: Outcome, *, sweep: bool, fresh: bool = False
) -> float | None:
    """The least floor of the unswept groups that may lower the bound (inf if none may);
    None when one has no floor yet (only without `sweep`).

    A group's floor: its coarse floor (coarse_floor), raised to its expert floor
    (expert_floor) where the coarse one does not reach the incumbent (one at or above it
    cannot lower the bound, and the group is left out), else with `sweep` its schedule-independent
    work floor (work_floor, computed once per group, kept in out.pending_floors) raised to
    the coarse floor. Without `sweep` (a progress report), or once the search's clock has
    passed search.time_limit_s plus tuning.finish_slack_s, only what is already known
    counts: the coarse floor, else with `sweep` the work kinds' floor where every kind is
    known, else 0 (a step takes positive time, so the bound stays a valid lower bound; no
    gap is then stated: None). The bound of a search cut by its limit thus costs a scan of
    what was computed, not a cost model call per group.

    A scan that found a floor for every group is kept (`out.pending_scan`): the unswept
    groups only ever shrink (the sweep takes them from the front, a big group's rest stays
    a part of it), their floors stay valid and the incumbent only falls, so the least of an
    earlier scan is a floor of every later unswept group. A progress report reuses the last
    one (DeepSeek-V3 on 2,048 GPUs may leave 300,000 groups unswept: a scan per report would
    cost more than the search); a bound with `sweep` scans again unless nothing changed since, and
    `fresh` always scans."""
    bound = time_bound_s(request, out)
    stamp = (id(out.pending), len(out.pending), bound)
    kept = out.pending_scan
    if kept is not None and not fresh and (not sweep or kept[0] == stamp):
        return kept[1]
    src = out.source if out.source is not None else resolve_costs(request)
    deadline = request.search.time_limit_s + out.tuning.finish_slack_s
    late = not sweep or out.now() >= deadline
    enough = bound * (1 - REL_TOL) if bound is not None else math.inf
    least = math.inf
    for members in out.pending:
        if bubble_closed(request, out, members[0].pp):  # a group shares its pp
            continue
        key = id(members)
        if key in out.pending_floors:
            floor = out.pending_floors[key]
            if floor is not None:
                least = min(least, floor)
            continue
        coarse = out.shared_floors.get(group_keys(out, members)[0])  # positive: both known
        if not coarse:
            coarse = coarse_floor(request, src, out, members, known=late)
            if coarse is None or coarse < enough:
                expert = expert_floor(request, src, out, members, known=late)
                coarse = max(coarse or 0.0, expert) if expert is not None else coarse
        if coarse is not None and coarse >= enough:
            continue  # at or above the incumbent: it cannot lower the bound
        late = late or out.now() >= deadline
        if not late:
            exact = work_floor(request, src, out, members)
            if exact is None and coarse is None:  # no costs for any member
                out.pending_floors[key] = None
                continue
            floor = max(exact or 0.0, coarse or 0.0)
            out.pending_floors[key] = floor
        elif coarse is not None:
            floor = coarse
        elif not sweep:
            return None
        else:
            floor = work_floor(request, src, out, members, known=True) or 0.0
        least = min(least, floor)
    out.pending_scan = (stamp, least)
    return least


def _coarse_floors_of(request: PlanRequest, src: CostSource, out: Outcome, limit: float) -> None:
    """Evaluate the coarse floor of every unswept group's key (a few hundred evaluations
    on the largest requests) while the search's clock is below `limit`, so that the bound
    of a search cut short counts a positive floor for every group (_open_floors)."""
    for members in out.pending:
        if coarse_key(members[0]) not in out.coarse_kinds:
            if out.now() >= limit:
                return
            coarse_floor(request, src, out, members)


def _edge_floors_of(request: PlanRequest, src: CostSource, out: Outcome, limit: float) -> None:
    """Objective bubble: the edge floor (group_edge_floor) of every unswept group, kept in
    out.pending_bubble, while the search's clock is below `limit` (one PartitionInputs per
    kind and modes, the rest arithmetic), so that the final bound and _settle_pending_bubble
    need no cost model. Not while a plan of zero bubble is at hand (the sweep stops for its
    proof, _zero_bubble_to_prove, after which bubble_closed settles every pp > 1 group)."""
    if request.objective != "bubble" or request.search.mode == "exhaustive":
        return
    plan = out.best or out.provisional
    if plan is not None and plan[1].score.bubble_fraction == 0.0:
        return
    for members in out.pending:
        if members[0].pp <= 1 or id(members) in out.pending_bubble:
            continue
        late = out.now() >= limit
        edge = group_edge_floor(request, src, out, members, known=late)
        if edge is not None:
            out.pending_bubble[id(members)] = edge


def _memory_floors_of(request: PlanRequest, src: CostSource, out: Outcome, limit: float) -> None:
    """The kind memory floor (kind_memory_floor) of unswept groups while the search's clock
    is below `limit` (arithmetic on the layer costs), so that the close
    (_settle_pending) finds them computed whenever it runs. Without an incumbent's
    time to beat (objective bubble), every group's in sweep order. With one, first what can
    raise the bound of the unswept groups (least_first), then the others below it by their
    known floor in sweep order. The first within tuning.least_first_share of the time left
    (it stops early where it finds the group that holds the bound), the pass and the others
    together within tuning.cut_floors_share of it (those after the pass, if any time is
    left): a pass over every unswept group took the whole limit on DeepSeek-V3 on 2,048 GPUs
    (~300,000 groups at the first cut) and left its bound where it was."""
    if request.search.mode == "exhaustive" or out.now() >= limit:
        return  # (the queue of least_first alone is a pass over every unswept group)
    bound = time_bound_s(request, out)
    enough = math.inf
    if bound is not None:
        now, tuning = out.now(), out.tuning
        enough = bound * (1 - REL_TOL)
        least_first(
            request, src, out, min(limit, now + tuning.least_first_share * (limit - now)), enough
        )
        limit = min(limit, now + tuning.cut_floors_share * (limit - now))
    # then, while time is left, the other groups' in sweep order (the close settles those
    # over the cap: a search whose every group is settled is OPTIMAL)
    for members in out.pending:
        if out.now() >= limit:
            return
        if bound is None or known_time_floor(request, src, out, members) < enough:
            kind_memory_floor(request, src, out, members, known=False)


def search_bounds(
    request: PlanRequest, out: Outcome, *, sweep: bool
) -> tuple[float | None, float | None, float | None]:
    """(lower bound of the step time, gap, bubble bound) now (docs/search.md, Gap and status);
    Nones where not known yet."""
    best = out.best
    floors = _open_floors(request, out, sweep=sweep)
    if best is None or floors is None:
        return None, None, None
    incumbent = best[1].score.step_time_s
    low = min([incumbent, *floors])
    if request.objective == "bubble":
        bubble = best[1].score.bubble_fraction
        # the least bubble floor of the open configurations (0 for one not visited yet, whose
        # floor is not computed; an unswept group has none)
        bound_bubble = min(
            [
                bubble,
                *(
                    max(e.bubble_floor or 0.0, entry_edge_floor(e))
                    for e in out.entries
                    if not settled(request, out, e)
                ),
            ]
        )
        if out.pending:  # an unswept group counts its edge floor where known, else 0
            pending = (out.pending_bubble.get(id(g), 0.0) for g in out.pending)
            bound_bubble = min(bound_bubble, min(pending, default=bubble))
        if bubble > bound_bubble:
            return low, bubble - bound_bubble, bound_bubble
        return low, incumbent / low - 1.0 if low > 0 else None, bound_bubble
    # a bound of 0 (an unswept group whose floor is not known) proves no finite gap: None
    return low, (incumbent / low - 1.0 if low > 0 else None), None


def _gap_reached(request: PlanRequest, out: Outcome, *, throttle: bool = False) -> bool:
    """A positive search.gap_tolerance is met (the proof itself ends the search at 0).

    Under objective time the unswept groups can only lower the bound, so where the visited
    configurations' floors alone leave a gap above the tolerance (_entries_gap) it is not
    met, and their floors are not scanned. `throttle`: where it is asked per group or per
    configuration, a check (every entry, and where needed every unswept group: DeepSeek-V3's 300,000
    unswept groups cost ~0.3 s a scan) runs at most every tuning.progress_every_s of the
    search's clock, and at most tuning.gap_check_share of it: the next waits the check's own
    cost / gap_check_share. Unthrottled per configuration, the exact phase's pass over
    thousands of them (each returning at once past the limit) cost a scan each, quadratic
    in them."""
    tol = request.search.gap_tolerance
    if tol <= 0 or out.best is None:
        return False
    if out.stopped_at_gap:  # once within it, always: the incumbent only falls, the floors rise
        return True
    now = out.now()
    if throttle and now < out.gap_check_after:
        return False
    if request.objective == "time" and _entries_gap(request, out) > tol:
        reached = False
    else:
        gap = search_bounds(request, out, sweep=True)[1]
        reached = out.stopped_at_gap = gap is not None and gap <= tol
    if throttle:
        cost = out.now() - now
        out.gap_check_after = now + max(
            out.tuning.progress_every_s, cost / out.tuning.gap_check_share
        )
    return reached


def _entries_gap(request: PlanRequest, out: Outcome) -> float:
    """Objective time: the gap with only the visited configurations' floors (at most the
    true gap: an unswept group's floor can only lower the bound); inf without an
    incumbent."""
    if out.best is None:
        return math.inf
    incumbent = out.best[1].score.step_time_s
    low = min([incumbent, *_entry_floors(request, out)])
    return incumbent / low - 1.0 if low > 0 else math.inf


def _entry_floors(request: PlanRequest, out: Outcome) -> list[float]:
    """The floors of the visited configurations not settled."""
    return [e.floor_s for e in out.entries if not settled(request, out, e)]


def close_search(request: PlanRequest, out: Outcome) -> None:
    """The final bound, gap and status: OPTIMAL iff every configuration is settled."""
    # (a pass over up to hundreds of thousands of unswept groups, allocating as it settles
    # them, whose full collections would scan everything the search built)
    freeze_alive()
    _settle_pending(request, out, memory=True)
    _settle_pending_bubble(request, out)
    scan = out.pending_scan
    low, gap, bubble = search_bounds(request, out, sweep=True)
    out.lower_bound_s, out.gap, out.bubble_bound = low, gap, bubble
    if out.pending_scan is not scan:  # the bound's scan computed floors: they may settle more
        _settle_pending(request, out, memory=False)
    # OPTIMAL only if every group was reached and every configuration settled
    if out.pending or any(not settled(request, out, e) for e in out.entries):
        out.status = "FEASIBLE"
    if out.best is not None and out.status == "OPTIMAL":
        out.lower_bound_s, out.gap = out.best[1].score.step_time_s, 0.0
    out.stopped_at_gap = out.stopped_at_gap and out.status == "FEASIBLE"


def _memory_pruned(out: Outcome, members: list[Config], floor: float, time_floor: float) -> None:
    """Settle a group by its kind memory floor (a cheap MemoryGroup: explain refines its
    time floor)."""
    out.group_pruned += len(members)
    out.group_memory_floor = min(out.group_memory_floor, floor)
    out.memory_groups.append(MemoryGroup(members, floor, time_floor, cheap=True))


def _settle_pending_bubble(request: PlanRequest, out: Outcome) -> None:
    """Objective bubble with a proven incumbent of positive bubble: unswept groups whose edge
    floor (group_edge_floor) is above its bubble are pruned (settled), as the sweep would
    prune them; the others keep their floor for the bubble bound (out.pending_bubble). The
    kinds' terms are computed while the clock is before search.time_limit_s plus
    tuning.finish_slack_s, as the bound's cost-model calls are; after it, only those known."""
    bubble = _positive_bubble(request, out)
    if bubble is None or not out.pending:
        return
    src = out.source if out.source is not None else resolve_costs(request)
    deadline = request.search.time_limit_s + out.tuning.finish_slack_s
    keep = []
    for members in out.pending:
        edge = out.pending_bubble.get(id(members))
        if edge is None and members[0].pp > 1:
            late = out.now() >= deadline
            edge = group_edge_floor(request, src, out, members, known=late)
        if edge is not None and edge > bubble:
            out.group_bubble_pruned += len(members)
            continue
        if edge is not None:
            out.pending_bubble[id(members)] = edge
        keep.append(members)
    out.pending = keep


def _settle_pending(request: PlanRequest, out: Outcome, *, memory: bool) -> None:
    """Settle unswept groups as the sweep would prune them, in one pass: those whose known
    time floor (known_time_floor) reaches the incumbent (none can beat it, whatever its
    memory), then with `memory` those whose kind memory floor (kind_memory_floor) is over the
    cap, kept as memory-pruned groups with their known time floor (cheap: group_time_floor
    refines it for explain).

    The memory floors are computed while the clock is before search.time_limit_s; after it,
    only those known count, and the pass costs lookups alone (each group's keys,
    group_keys, and its time floor once per floor_fields): tuning.finish_slack_s covers
    them (~300,000 unswept groups on DeepSeek-V3 on 2,048 GPUs). Past the limit plus that
    slack, the least known floor of the groups left (_pending_floor's, which would compute
    no floor then either) is kept as out.pending_scan, so that the final bound scans no
    group again (objective time)."""
    if not out.pending or request.search.mode == "exhaustive":
        return
    src = out.source if out.source is not None else resolve_costs(request)
    late = out.now() >= request.search.time_limit_s  # no more memory floors
    deadline = request.search.time_limit_s + out.tuning.finish_slack_s
    bound = time_bound_s(request, out)
    enough = bound * (1 - REL_TOL) if bound is not None else math.inf
    shared: dict[FloorFields, float] = {}  # shared_floor per fields, once per pass
    own, keys, memory_kinds = out.pending_floors, out.group_keys, out.memory_kinds
    keep = []
    least = math.inf
    for members in out.pending:
        fields, key = keys.get(id(members)) or group_keys(out, members)
        time_floor = shared.get(fields)
        if time_floor is None:
            time_floor = shared[fields] = fields_floor(out, fields)
        kept = own.get(id(members), 0.0)  # None: no costs for any member (no plan either)
        if kept:
            time_floor = max(time_floor, kept)
        if time_floor >= enough:  # (whatever its memory: it cannot beat the incumbent)
            out.group_time_pruned += len(members)
            out.time_groups.append(MemoryGroup(members, 0.0, time_floor))
            continue
        cheap = memory_kinds.get(key, -1.0) if memory else None  # -1: not computed yet
        if cheap is not None and cheap < 0:
            late = late or out.now() >= request.search.time_limit_s
            cheap = None if late else kind_memory_floor(request, src, out, members, known=False)
        if cheap is not None and over_cap(request, cheap):
            _memory_pruned(out, members, cheap, time_floor)
            continue
        keep.append(members)
        if kept is not None:  # (as _pending_floor: 0 where nothing is known)
            known = time_floor or work_floor(request, src, out, members, known=True)
            least = min(least, known or 0.0)
    out.pending = keep
    if out.now() >= deadline and request.objective == "time":
        out.pending_scan = ((id(keep), len(keep), bound), least)


class _Reporter:
    """Calls on_progress with a SearchProgress, at most every tuning.progress_every_s of the
    search's clock (and always at the end)."""

    def __init__(
        self,
        request: PlanRequest,
        out: Outcome,
        on_progress: Callable[[SearchProgress], None] | None,
    ) -> None:
        self.request, self.out, self.on_progress = request, out, on_progress
        self.last = -math.inf

    def __call__(self, *, final: bool = False) -> None:
        out = self.out
        if self.on_progress is None:
            return
        now = out.now()
        if not final and now - self.last < out.tuning.progress_every_s:
            return
        self.last = now
        if final:
            low, gap = out.lower_bound_s, out.gap
        else:
            low, gap, _ = search_bounds(self.request, out, sweep=False)
        settled_now = (
            out.num_configs
            - sum(len(ms) for ms in out.pending)
            - sum(not settled(self.request, out, e) for e in out.entries)
        )
        if final:
            settled_now = out.num_configs if out.status == "OPTIMAL" else settled_now
        total = max(1, out.num_configs)
        self.on_progress(
            SearchProgress(
                fraction=1.0 if final else min(1.0, max(0, settled_now) / total),
                settled=max(0, settled_now),
                total=out.num_configs,
                incumbent_s=out.best[1].score.step_time_s if out.best is not None else None,
                lower_bound_s=low,
                gap=gap,
                elapsed_s=now,
            )
        )


def _sweep(
    request: PlanRequest,
    out: Outcome,
    src: CostSource,
    groups: list[list[Config]],
    prune: bool,
    report: Callable[[], None],
    share_s: float,
) -> list[list[Config]]:
    """Floors per group, then PartitionInputs, floors and a heuristic per configuration of each
    surviving group, until `share_s` of elapsed time (once an incumbent exists). Returns the
    groups not reached.

    `out.pending` (what the progress report and the gap check read as not swept) is the
    groups from the current one on, refreshed at most every tuning.progress_every_s, as
    often as either reads it: copying the rest of the list at every group was quadratic
    (DeepSeek-V3 on 2,048 GPUs has 311,248 groups). Between two refreshes it also holds
    groups swept since, whose floors stay valid lower bounds of what they became."""
    refreshed = -math.inf
    for done, members in enumerate(groups):
        now = out.now()
        if done == 0 or now - refreshed >= out.tuning.progress_every_s:
            out.pending, refreshed = groups[done:], now
        report()
        if _has_plan(out) and now >= share_s:
            return groups[done:]
        if _gap_reached(request, out, throttle=True):
            return groups[done:]
        if _zero_bubble_to_prove(request, out, groups, done):
            return groups[done:]
        if bubble_closed(request, out, members[0].pp):  # a group shares its pp
            out.group_time_pruned += len(members)
            continue
        bound = _sweep_bound_s(request, out)
        enough = bound * (1 - REL_TOL) if bound is not None else None
        if prune and enough is not None:
            # The layers' work m W / pp = b W tp cp / (mbs N) is one number per work kind
            # (work_floor, cached): kinds that cannot beat the incumbent (large cp on short
            # chunks, say) are settled before the group's PartitionInputs are built; first
            # by the coarse floor of its (tp, mbs, sp, cp), one evaluation for all its kinds.
            work = coarse_floor(request, src, out, members)
            if work is None or work < enough:
                work = expert_floor(request, src, out, members) or work
            if work is None or work < enough:
                work = work_floor(request, src, out, members)
            if work is not None and work < enough:
                # with the average post time (post_floor): the first terms of the group's
                # time floor (group_time_floor_s), before its representatives are built
                post = post_floor(request, src, out, members)
                work += post / members[0].pp if post is not None else 0.0
            if work is not None and work >= enough:
                out.group_time_pruned += len(members)
                out.time_groups.append(MemoryGroup(members, 0.0, work))
                continue
        bubble = _positive_bubble(request, out) if prune else None
        if bubble is not None and members[0].pp > 1:
            edge = group_edge_floor(request, src, out, members, known=False)
            if edge is not None and edge > bubble:
                out.group_bubble_pruned += len(members)
                continue
        if prune:  # over the cap by its kind's memory floor: no PartitionInputs built
            cheap = kind_memory_floor(request, src, out, members, known=False)
            if cheap is not None and over_cap(request, cheap):
                work = coarse_floor(request, src, out, members, known=True)
                _memory_pruned(out, members, cheap, work or 0.0)
                continue
        floors = group_floors(request, src, members, enough, memory_only=prune)
        if floors is not None and floors[0] > request.memory_cap_bytes and prune:
            out.group_pruned += len(members)
            out.group_memory_floor = min(out.group_memory_floor, floors[0])
            out.memory_groups.append(MemoryGroup(members, *floors, cheap=True))
            continue
        group_floor = floors[1] if floors is not None else 0.0
        if enough is not None and group_floor >= enough:
            out.group_time_pruned += len(members)
            if floors is not None:  # kept for the alternatives (_alternatives)
                out.time_groups.append(MemoryGroup(members, *floors))
            continue
        entries: list[Entry] = []
        for i, cfg in enumerate(members):
            if _has_plan(out) and out.now() >= share_s:  # a big group: stop inside it
                out.entries.extend(entries)
                return [members[i:], *groups[done + 1 :]]
            try:
                inputs = partition_inputs(request, cfg.candidate(), source=src)
            except SpecError:
                out.invalid += 1  # e.g. a schedule torch cannot run with this m
                continue
            # (a floor at or above the incumbent may stop short: it is pruned either way)
            seen = restricted(inputs, cfg.modes)  # the floors of its modes only
            floor = time_floor_s(seen, enough)
            entry = Entry(cfg, inputs, memory_floor_bytes(seen), floor)
            entries.append(entry)
            if prune and entry.memory_floor_bytes <= inputs.cap_bytes:
                if _cannot_win(request, out, entry) and (
                    cfg.family in out.families or not _wants_families(request)
                ):
                    continue  # its floor reaches the incumbent: no heuristic (the exact
                    # phase prunes it), unless its family still needs an alternative
                for quick in quick_partitions(inputs, cfg.modes):
                    sc = Scored(quick, score(inputs, quick))
                    if sc.score.feasible:
                        entry.estimate_s = min(entry.estimate_s, sc.score.step_time_s)
                    _offer(request, out, entry, sc)
        out.entries.extend(entries)
        # A group that gave the incumbent: its configuration's improve-pass work (hints and
        # hill climb) now rather than after the sweep, so that the groups after it meet the
        # better incumbent (a quick partition is a start, often a few tenths of a per cent
        # above the configuration's optimum); each configuration is improved once
        # (entry.seeds).
        best = out.best
        if (
            prune
            and request.objective == "time"
            and best is not None
            and any(e is best[0] for e in entries)
        ):
            n, split = len(src.layers), stage_split(request)
            _improve(request, out, best[0], split, n, lambda: share_s - out.now())
    return []


def _sweep_bound_s(request: PlanRequest, out: Outcome) -> float | None:
    """The step time a group must beat to be swept: time_bound_s, or under objective bubble
    the provisional plan's step time once it has zero bubble. That plan is feasible, and no
    plan has less bubble, so only a zero-bubble configuration faster than it can win: a
    group whose time floor reaches it cannot, as with a proven zero-bubble incumbent. (Only
    the sweep reads it: the exact phase must still prove the provisional configuration,
    whose solve a bound at its own step time would cut off.)"""
    bound = time_bound_s(request, out)
    provisional = out.provisional
    if (
        bound is None
        and request.objective == "bubble"
        and request.search.mode != "exhaustive"
        and provisional is not None
        and provisional[1].score.bubble_fraction == 0.0
    ):
        return provisional[1].score.step_time_s
    return bound


def _wants_families(request: PlanRequest) -> bool:
    """Whether the best plan of each configuration family (Outcome.families) is read: by the
    alternatives (search.top_k) and objective bubble's trade-off lines (planner.search.explain).
    Otherwise a configuration that cannot beat the incumbent needs no partition at all."""
    return request.search.top_k > 0 or request.objective == "bubble"


def _zero_bubble_to_prove(
    request: PlanRequest, out: Outcome, groups: list[list[Config]], done: int
) -> bool:
    """Objective bubble: the sweep has just passed the last pp = 1 group (they come first,
    their 1F1B bubble share being 0) and holds a provisional plan of zero bubble. The sweep
    then stops for the exact phase to prove it (a pp = 1 configuration has one stage: its
    proof is a few solves); once proven, bubble_closed settles every pp > 1 group when the
    next sweep reaches it, instead of each being swept first (their PartitionInputs and
    quick partitions)."""
    provisional = out.provisional
    return (
        request.objective == "bubble"
        and request.search.mode != "exhaustive"
        and 0 < done < len(groups)
        and groups[done - 1][0].pp == 1
        and groups[done][0].pp > 1
        and provisional is not None
        and provisional[1].score.bubble_fraction == 0.0
    )


def _has_plan(out: Outcome) -> bool:
    """A plan to return exists: the incumbent, or objective bubble's provisional one (its
    incumbent must be proven, so without this the sweep of a bubble search never stopped at
    its share)."""
    return out.best is not None or out.provisional is not None


def _visit(
    request: PlanRequest,
    out: Outcome,
    entry: Entry,
    split: StageSplit,
    n: int,
    time_left: Callable[[], float],
    *,
    prove: bool = True,
    polish: bool = False,
    interim: float = 0.0,
) -> float:
    """Bound, then solve one configuration (with what an unfinished earlier solve of it
    learned: `_reopen`; `prove`, `polish`: see exact.solve_config); returns the solvers' time
    spent (CP-SAT). `interim` > 0 (objective time, with an incumbent): the solve proves only
    that nothing beats the incumbent / (1 + interim) (_interim_bound_s); unless that finds
    the configuration's optimum, it stays pending with what it proved (_after_interim)."""
    inputs, cfg = entry.inputs, entry.config
    if entry.verdict != "pending":  # dominated, or visited already (after the improve pass)
        return 0.0
    exhaustive = request.search.mode == "exhaustive"
    if entry.memory_floor_bytes > inputs.cap_bytes and not exhaustive:
        entry.verdict = "memory"
        return 0.0
    best = out.best
    bound = time_bound_s(request, out)
    if (
        bubble_closed(request, out, cfg.pp)
        or bubble_beaten(request, out, entry, compute=time_left() > 0)
        or (bound is not None and entry.floor_s >= bound * (1 - REL_TOL))
    ):
        entry.verdict = "pruned"
        return 0.0
    left = time_left()
    if left <= 0 and (best is not None or out.provisional is not None):
        entry.verdict = "timeout"
        return 0.0
    if left <= 0:  # never return nothing: the heuristics (scored by the improve pass, if run)
        entry.verdict = "timeout"
        for heuristic in entry.seeds or [Scored(h, score(inputs, h)) for h in _hints(entry, n)]:
            _offer(request, out, entry, heuristic)
        return 0.0
    ties = request.objective == "bubble"  # the tie rule (exact.tie_key), in either mode
    # (callers pass _interim_gap's level: 0 but under objective time in the optimal mode)
    interim = interim if bound is not None else 0.0
    solve_bound = bound / (1 + interim) if bound is not None else None
    out.interim_solves += interim > 0
    if exhaustive:
        res = exhaustive_config(inputs, modes=cfg.modes, split=split, ties=ties)
    else:
        domains, probed = start_domains(entry, solve_bound)
        known = Known(
            paths=entry.known_paths,
            scored_hints=entry.seeds,
            descended=entry.descended,
            domains=domains,
            probed=probed,
        )
        limits = SolveLimits(
            left, time_left, request.search.workers, request.search.seed, out.cpu_clock
        )
        res = solve_config(
            inputs,
            modes=cfg.modes,
            split=split,
            bound_s=solve_bound,
            hints=(
                ()
                if entry.seeds or _skip_hints(entry, bound, out.tuning)
                else _split_hints(entry, n, split)
            ),
            known=known,
            limits=limits,
            prove=prove,
            polish=polish,
            tuning=out.tuning,
            ties=ties,
        )
    entry.result, entry.verdict = res, "solved"
    out.solver_calls += res.solver_calls
    out.cuts += res.cuts
    if res.status in ("FEASIBLE", "UNKNOWN"):
        # what the unfinished solve proved: its path cuts' whole-layer floor, its LP floors
        floor = cut_floor_s(inputs, res.paths) if res.paths else None
        entry.proof_floor_s = max(entry.proof_floor_s, floor or 0.0, res.floor_s)
    proven = res.status == "OPTIMAL"
    for sc in (res.best, *res.evaluated):
        if sc is not None and sc.score.feasible:
            _offer(request, out, entry, sc, proven=proven and sc is res.best)
    if interim and not proven and solve_bound is not None:
        _after_interim(entry, solve_bound)
    return res.solver_s


def _after_interim(entry: Entry, solve_bound_s: float) -> None:
    """After a solve against an interim bound that did not find the configuration's optimum:
    BOUNDED means nothing beats that bound (its floor; REL_TOL is the proof's tolerance);
    the configuration is pending again with its path cuts (valid at every bound). Not with
    the count domains that solve proved: they hold only the partitions better than the
    interim bound, and a later solve asks about those better than the incumbent; the ones
    an earlier solve proved for a bound at or above the incumbent stay."""
    res = entry.result
    if res is None:
        return
    if res.status == "BOUNDED":  # (with the path cuts' floor: it may settle it outright)
        floor = max(solve_bound_s * (1 - REL_TOL), cut_floor_s(entry.inputs, res.paths) or 0.0)
        entry.proof_floor_s = max(entry.proof_floor_s, floor)
    elif res.domains is not None:
        entry.interim_domains, entry.interim_bound_s = res.domains, solve_bound_s
        entry.interim_probed = res.probed
    entry.known_paths = tuple(res.paths)
    entry.verdict, entry.result = "pending", None


def start_domains(entry: Entry, solve_bound_s: float | None) -> tuple[Domains | None, bool]:
    """The count domains a solve against `solve_bound_s` starts from, and whether probing
    reached its fixed point on them: those an exact solve proved (`known_domains`, for a
    bound at or above every later one), intersected with those an interim solve proved for
    a bound at or above `solve_bound_s` (each holds every partition better than its bound,
    so every partition better than `solve_bound_s`: an interim solve cut short resumes its
    probing where the last one stopped). Probed where the interim bound is this one and its
    probing reached its fixed point there on the exact domains (or none)."""
    kept = entry.interim_domains
    if kept is None or solve_bound_s is None or solve_bound_s > entry.interim_bound_s:
        return entry.known_domains, entry.probed
    probed = entry.interim_probed and solve_bound_s == entry.interim_bound_s
    return intersect(entry.known_domains, kept), probed


def _interim_gap(request: PlanRequest, tuning: SearchTuning) -> float:
    """The gap the interim solves prove (objective time): tuning.interim_gap, or the
    request's gap_tolerance where that is wider (the search stops there anyway)."""
    if request.objective != "time" or request.search.mode == "exhaustive":
        return 0.0
    return max(tuning.interim_gap, request.search.gap_tolerance)


def _skip_hints(entry: Entry, bound: float | None, tuning: SearchTuning) -> bool:
    """The configuration's quick partition fits but is more than tuning.descend_within above
    the bound, and it was never improved: its solve starts without the hint partitions
    (exact._worth_climbing's reasoning: hints that far behind rarely beat the incumbent,
    and its floors, cutting planes and CP-SAT settle it or find any better partition it
    holds, hints or not). Where none fits (estimate inf) the hints may hold the first
    partition that does, and are kept."""
    estimate = entry.estimate_s
    return (
        bound is not None
        and math.isfinite(estimate)
        and estimate > bound * (1 + tuning.descend_within)
    )


def _far_pass(
    request: PlanRequest,
    out: Outcome,
    entries: list[Entry],
    split: StageSplit,
    n: int,
    limit: float,
    cap: float,
) -> float:
    """The cheap phases (exact.solve_config with prove=False: the seed paths' floor, the
    count domains, the LP and probing), within tuning.settle_share of the first pass's `cap`
    each, for the pending configurations whose heuristics are more than tuning.far_within
    above the incumbent: their critical paths are usually long enough for those to settle
    them, and a first pass that runs out of time on closer ones would leave them, unvisited,
    holding the bound. One left unsettled is pending again with what it learned (_reopen).
    Returns the solvers' time spent."""
    bound = time_bound_s(request, out)
    if request.objective != "time" or request.search.mode == "exhaustive" or bound is None:
        return 0.0
    tuning, elapsed = out.tuning, out.now
    spent = 0.0
    for entry in entries:
        if elapsed() >= limit or _gap_reached(request, out, throttle=True):
            break
        far = bound * (1 + tuning.far_within) < entry.estimate_s < math.inf
        if entry.verdict != "pending" or not far:
            continue  # (the settle pass had those no heuristic fits)
        own = _capped(elapsed, limit, tuning.settle_share * cap)
        spent += _visit(request, out, entry, split, n, own, prove=False)
        if entry.result is not None and _unproven(entry):
            _reopen(entry)
    return spent


def _interim_pass(
    request: PlanRequest,
    out: Outcome,
    entries: list[Entry],
    split: StageSplit,
    n: int,
    limit: float,
    cap: float,
) -> float:
    """Before the second pass's proofs (each with all the time left, lowest floor first):
    rounds of solves against the interim bound (_interim_bound_s), each over the
    configurations of `entries` still below it, lowest floor first, the k-th round within
    2^k x the first pass's `cap` each, until none is below it or a round raised no floor.
    Where the first pass runs out of time, the configurations it left hold the bound one
    below the other; these solves raise most to the interim bound in a fraction of the time
    an exact proof takes (Llama 3 70B on 1,024 H100s under megatron: 40 interleaved
    configurations within 0.9 % of the incumbent), and the rounds come back with more time
    to those that hold the bound. Returns the solvers' time spent."""
    elapsed = out.now
    level = _interim_gap(request, out.tuning)
    spent = 0.0
    rounds = 0
    floors: list[float] = []
    while True:
        below = [e for e in entries if _below_interim(request, out, e)]
        now = sorted(e.floor_s for e in below)
        if not below or now == floors:  # all there, or the last round raised no floor
            return spent
        floors = now
        below.sort(key=lambda e: (e.floor_s, e.estimate_s))
        for entry in below:
            if elapsed() >= limit or _gap_reached(request, out, throttle=True):
                return spent
            if not _below_interim(request, out, entry):
                continue  # a better incumbent came meanwhile, or its floor rose
            if entry.result is not None:
                _reopen(entry)  # an exact solve's domains: valid at the interim bound too
            own = _capped(elapsed, limit, cap * 2**rounds)
            spent += _visit(request, out, entry, split, n, own, interim=level)
        rounds += 1


def _below_interim(request: PlanRequest, out: Outcome, entry: Entry) -> bool:
    """Unsettled, and its floor below the interim bound."""
    if not (_unproven(entry) or entry.verdict == "pending"):
        return False
    interim = _interim_bound_s(request, out)
    return interim is not None and entry.floor_s < interim * (1 - REL_TOL)


def _interim_bound_s(request: PlanRequest, out: Outcome) -> float | None:
    """The incumbent / (1 + the interim gap): what the interim solves prove nothing beats."""
    bound = time_bound_s(request, out)
    level = _interim_gap(request, out.tuning)
    return bound / (1 + level) if bound is not None and level else None


def _hints(entry: Entry, n: int) -> tuple[Partition, ...]:
    extra = tuple(lo for lo, _ in balanced_bounds(n, entry.inputs.num_stages))
    return hint_partitions(entry.inputs, entry.config.modes, (*extra, n))


def _split_hints(entry: Entry, n: int, split: StageSplit) -> tuple[Partition, ...]:
    """The hints that keep a framework's stage split."""
    return tuple(h for h in _hints(entry, n) if _split_ok(h.bounds, split, entry.inputs))


def _improve(
    request: PlanRequest,
    out: Outcome,
    entry: Entry,
    split: StageSplit,
    n: int,
    time_left: Callable[[], float],
) -> None:
    """The improve pass on one configuration (exact.improve_config): its heuristics and hill
    climb offered as incumbents, kept for its solve; skipped if its floors settle it."""
    inputs = entry.inputs
    if (
        entry.verdict != "pending"
        or entry.seeds
        or entry.memory_floor_bytes > inputs.cap_bytes
        or _cannot_win(request, out, entry)
    ):
        return
    entry.seeds = tuple(
        improve_config(
            inputs,
            modes=entry.config.modes,
            hints=_split_hints(entry, n, split),
            descend=split == "any",
            time_left=time_left,
            tuning=out.tuning,
            bound_s=time_bound_s(request, out),
        )
    )
    entry.descended = time_left() > 0 or split != "any"
    for sc in entry.seeds:
        _offer(request, out, entry, sc)
        if sc.score.feasible:
            entry.estimate_s = min(entry.estimate_s, sc.score.step_time_s)


def _reopen(entry: Entry) -> None:
    """Make an unfinished configuration pending again, keeping the path cuts and count
    domains its solve proved (valid for every later, lower bound)."""
    if entry.result is not None:
        entry.known_paths = tuple(entry.result.paths)
        entry.known_domains = entry.result.domains
        entry.probed = entry.result.probed
    entry.verdict, entry.result = "pending", None


def _unproven(entry: Entry) -> bool:
    return entry.result is not None and entry.result.status in ("FEASIBLE", "UNKNOWN")


def _capped(elapsed: Callable[[], float], limit: float, cap: float) -> Callable[[], float]:
    """Time left for one configuration: at most `cap` from now, never past the limit."""
    start = elapsed()
    return lambda: min(limit - elapsed(), cap - (elapsed() - start))


def _cannot_win(request: PlanRequest, out: Outcome, entry: Entry) -> bool:
    if bubble_closed(request, out, entry.config.pp) or bubble_beaten(request, out, entry):
        return True
    bound = time_bound_s(request, out)
    return bound is not None and entry.floor_s >= bound * (1 - REL_TOL)


def memory_rep(request: PlanRequest, out: Outcome, group: MemoryGroup) -> Entry | None:
    """An Entry standing for a memory-pruned group (its first member that the cost model
    accepts) with the group's floors, for the infeasibility diagnosis; None if none is."""
    src = out.source if out.source is not None else resolve_costs(request)
    for cfg in group.members:
        try:
            inputs = partition_inputs(request, cfg.candidate(), source=src)
        except SpecError:
            continue
        entry = Entry(cfg, inputs, group.memory_floor_bytes, group.time_floor_s)
        entry.verdict = "memory"
        return entry
    return None


def _offer(
    request: PlanRequest, out: Outcome, entry: Entry, sc: Scored, *, proven: bool = False
) -> None:
    """Keep `sc` if it is the best so far (overall and of its family). Partitions that break
    the framework's stage split (heuristics and neighbours do not know it) are refused.
    Objective bubble ranks each configuration by its time-optimal partition: only a
    `proven` one (its configuration solved to OPTIMAL) may become the incumbent; the others
    are kept as `provisional`, the plan of a search that proves none in time."""
    if not sc.score.feasible:
        return
    if not _split_ok(sc.partition.bounds, stage_split(request), entry.inputs):
        return
    bubble = request.objective == "bubble"
    if bubble and not proven:
        have = out.provisional
        if have is None or _rank(request, sc) < _rank(request, have[1]):
            out.provisional = (entry, sc)
    elif out.best is None or _rank(request, sc) < _rank(request, out.best[1]):
        out.best = (entry, sc)
        out.best_found_at_s = out.now()
    fam = entry.config.family
    have = out.families.get(fam)
    if have is None or _rank(request, sc) < _rank(request, have[1]):
        out.families[fam] = (entry, sc)


def _split_ok(bounds: tuple[int, ...], split: StageSplit, inputs: PartitionInputs) -> bool:
    return split_ok(bounds, split, main_run(inputs))


def _alternatives(
    request: PlanRequest, out: Outcome, n: int, time_left: Callable[[], float]
) -> None:
    """Fill `out.families` up to search.top_k configurations besides the winner's.

    The search itself keeps the best plan of each configuration it scored; configurations
    that a floor pruned before any partition (whole groups, mostly) get one here: their
    quick and hint partitions (planner.search.hints), lowest floor first. It stops once k
    others are known and the next floor is no lower than the k-th one's step time (no
    configuration left could rank above it), at tuning.alternative_tries per alternative,
    or when `time_left` is spent; `out.alternatives_note` says why when fewer than k came."""
    k = request.search.top_k
    if k == 0 or out.best is None:
        return
    win = out.best[0].config.family
    src = out.source if out.source is not None else resolve_costs(request)
    todo: list[tuple[float, Entry | Config, MemoryGroup | None]] = [
        (e.floor_s, e, None)
        for e in out.entries
        if e.config.family not in out.families
        and e.verdict != "memory"
        and e.memory_floor_bytes <= e.inputs.cap_bytes
    ]
    todo += [(g.time_floor_s, c, g) for g in out.time_groups for c in g.members]
    todo.sort(key=lambda t: t[0])
    tries, why = 0, None
    for floor, item, group in todo:
        fam = item.config.family if isinstance(item, Entry) else item.family
        others = sorted(_rank(request, sc)[0] for f, (_, sc) in out.families.items() if f != win)
        if len(others) >= k and (request.objective == "bubble" or floor >= others[k - 1]):
            return
        if fam in out.families or fam == win:
            continue
        if time_left() <= 0 or tries >= out.tuning.alternative_tries * k:
            why = "time" if time_left() <= 0 else "tries"
            break
        tries += 1
        entry = item if isinstance(item, Entry) else _entry_of(request, src, item, group)
        if entry is None:
            continue
        quick = quick_partition(entry.inputs, entry.config.modes)
        for part in (quick,) if fam in out.families else (quick, *_hints(entry, n)):
            sc = Scored(part, score(entry.inputs, part))
            ok = sc.score.feasible and _split_ok(part.bounds, stage_split(request), entry.inputs)
            have = out.families.get(fam)
            if ok and (have is None or _rank(request, sc) < _rank(request, have[1])):
                out.families[fam] = (entry, sc)
            if fam in out.families:
                break  # the hints only where the quick partition does not fit
    found = sum(f != win for f in out.families)
    if found >= k:
        return
    if why == "time":
        out.alternatives_note = f"{found} of {k}: the time limit ended the search for more"
    elif why == "tries" or out.pending:
        out.alternatives_note = (
            f"{found} of {k}: the search stopped before it scored every other configuration"
        )
    else:
        who = (
            "no other configuration"
            if found == 0
            else f"only {found} other configuration" + ("s" if found > 1 else "")
        )
        verb = "have" if found > 1 else "has"
        out.alternatives_note = (
            f"{found} of {k}: {who} (degrees, schedule, vpp, micro-batch size, ZeRO) "
            f"{verb} a plan that fits"
        )


def _entry_of(
    request: PlanRequest, src: CostSource, cfg: Config, group: MemoryGroup | None
) -> Entry | None:
    """An Entry for a configuration the sweep pruned with its group (the group's floors)."""
    try:
        inputs = partition_inputs(request, cfg.candidate(), source=src)
    except SpecError:
        return None
    floor = group.time_floor_s if group is not None else 0.0
    return Entry(cfg, inputs, memory_floor_bytes(inputs), floor, verdict="pruned")
