"""The exactness loop: CP-SAT on a lower bound, the simulator as judge, path cuts until proof.

For one configuration:

1. Seed the model with one path cut per pipeline rank (its busy time: every action of the
   rank in order is a path) and the critical paths of the hint partitions.
2. Cutting planes on the LP relaxation (lp_phase, planner.search.cutlp): round the LP's
   fractional split, simulate it and its neighbours, add their critical paths; the LP alone
   may already reach K (below) and settle the configuration. All of it inside the count
   domains that the whole-layer floors give (planner.search.domains: each rank's and
   stage's count of blocks, no solver). Then probing (probe_phase): each count's domain
   is cut wherever that LP proves a side holds nothing better; then branch and bound on
   those counts with the LP at every node (branch_phase): whole layers close most of the
   LP's remaining gap. The domains (and the hull of the nodes the branching leaves open)
   also bound CP-SAT.
3. Solve: with an incumbent, any partition with T + P <= K (a feasibility problem: T + P is a
   lower bound of the step time, see planner.search.model), where K is the best simulated step
   time known (this configuration's or the whole search's), scaled, times (1 - 5e-10), minus
   one unit; without one, minimise T + P.
4. INFEASIBLE: no partition can beat K — the incumbent is optimal (to a relative 5e-10),
   or the configuration cannot beat the search's incumbent, or (no incumbent) nothing fits.
5. Otherwise decode the partition, score it with the simulator (planner.search.partition),
   keep it if it is better, add its critical path as a cut (its bound now equals its
   simulated time up to the rounding of < L + S units of 2^-38 of the reference); if it does
   not fit, the memory row of each held point it breaks (the model starts with a few per rank:
   planner.search.model.seed_points); and if rounding, memory rounding or the recompute
   transient still lets it through, a no-good cut on exactly that partition. Go to 3.

6. Objective bubble only (solve_config(ties=True)), once the optimum is proven: tie_phase
   picks among the partitions that tie it by the tie rule (tie_key).

Every cut is a valid lower bound, so no partition better than the incumbent is ever cut off;
each iteration cuts off the decoded partition, so the loop ends. The time limit is CP-SAT's:
each solve gets what is left of the configuration's budget, measured by CP-SAT's own wall
time (the planning core reads no clock), or under a CPU clock (SolveLimits.cpu_clock) by the
solve's CPU time (model.solve_on_cpu reads the CPU clock of its own solve, nothing else).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from planner.cost import MODE_INDEX, PartitionScore
from planner.cost.partition import PartitionInputs
from planner.schedules import StageDurations, rank_stages
from planner.schedules.simulate import num_actions
from planner.search.bounds import cut_floor_s
from planner.search.cutlp import MARGIN, CutLP, LpPoint, rounded_bounds
from planner.search.domains import (
    Domains,
    counted_run,
    intersect,
    is_empty,
    rank_count_vectors,
    whole_layer_domains,
)
from planner.search.hints import repaired
from planner.search.model import CpuLimit, PartitionModel, StageSplit, layer_runs
from planner.search.partition import Partition, durations_of, schedule_of, score
from planner.search.paths import PathCut, critical_path, seed_cuts
from planner.search.tuning import TUNING, SearchTuning
from planner.specs.base import RecomputeMode

# Proof tolerance: a partition must beat the incumbent by more than this relative margin. It
# must exceed the model's rounding (model.HORIZON_UNITS), or partitions that tie the incumbent
# (moves inside a non-critical rank, recompute on idle layers) are excluded one no-good at a
# time. The exactness bench compares step times at a relative 1e-9.
REL_TOL = 5e-10

ConfigStatus = Literal["OPTIMAL", "BOUNDED", "INFEASIBLE", "FEASIBLE", "UNKNOWN"]


@dataclass(frozen=True)
class Scored:
    partition: Partition
    score: PartitionScore


@dataclass
class ConfigResult:
    """OPTIMAL: best proven; BOUNDED: proven no better than the bound given; INFEASIBLE:
    nothing fits; FEASIBLE / UNKNOWN: the time ran out with / without a partition."""

    status: ConfigStatus
    best: Scored | None
    solver_calls: int = 0
    cuts: int = 0
    solver_s: float = 0.0  # what its CP-SAT solves were charged (SolveOutcome.time_s)
    evaluated: list[Scored] = field(default_factory=list)
    paths: list[PathCut] = field(default_factory=list)  # every path cut it collected
    domains: Domains | None = None  # count domains that hold every better partition
    probed: bool = False  # ... and the probing phase ran to its fixed point on them
    floor_s: float = 0.0  # a lower bound of its optimum that the LP phases proved (lp_floor)

    def prove_floor(self, floor_s: float) -> None:
        """Keep `floor_s` if it is higher (each is a valid lower bound: lp_floor)."""
        self.floor_s = max(self.floor_s, floor_s)


# Objective bubble's tie rule. A configuration is ranked by its time-optimal partition; where
# several tie on step time (ties_with), the one that counts is the least tie_key: least total
# recompute time, then least bubble fraction, then the order of (stage bounds, per-layer mode
# indices). Recompute comes first because recompute off the critical path adds busy time
# without changing the step, which lowers the bubble fraction (idle / (pp x makespan),
# planner.schedules.simulate) for no gain: ranking ties by bubble alone would reward needless
# work. The exhaustive oracle (exhaustive.exhaustive_config) and the solver (tie_phase) both
# pick with `preferred`.
TieKey = tuple[float, float, tuple[int, ...], tuple[int, ...]]


def recompute_s(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> float:
    """Recompute time of one micro-batch over all layers: per layer, its input-gradient
    backward in its mode less that without recompute (PartitionInputs.bw_input_s holds
    backward + recompute + TP per mode). Summed in layer order, so partitions with the same
    modes give the same float whatever their stage bounds."""
    none = MODE_INDEX["none"]
    total = 0.0
    for bw, mode in zip(inputs.bw_input_s, modes, strict=True):
        total += bw[MODE_INDEX[mode]] - bw[none]
    return total


def ties_with(step_time_s: float, fastest_s: float) -> bool:
    """A step time that ties the fastest one: within the proof tolerance (REL_TOL)."""
    return step_time_s <= fastest_s * (1 + REL_TOL)


def tie_key(inputs: PartitionInputs, sc: Scored) -> TieKey:
    """The tie rule's order (above): the least is preferred."""
    part = sc.partition
    return (
        recompute_s(inputs, part.modes),
        sc.score.bubble_fraction,
        part.bounds,
        tuple(MODE_INDEX[m] for m in part.modes),
    )


def preferred(inputs: PartitionInputs, scored: list[Scored]) -> Scored | None:
    """The tie rule's pick among the feasible partitions of `scored`: the least tie_key of
    those that tie the fastest (None if none is feasible)."""
    feasible = [sc for sc in scored if sc.score.feasible]
    if not feasible:
        return None
    fastest = min(sc.score.step_time_s for sc in feasible)
    tied = [sc for sc in feasible if ties_with(sc.score.step_time_s, fastest)]
    return min(tied, key=lambda sc: tie_key(inputs, sc))


def lp_floor(value_s: float, bound_s: float) -> float:
    """A lower bound of the configuration's optimum from an LP solved over a region that
    holds every partition better than `bound_s` (the count domains, or the nodes a branching
    left open): a partition in the region is no faster than the LP's optimum `value_s`
    (GLOP's tolerances: MARGIN), one outside it no faster than `bound_s`."""
    return min(value_s * (1 - MARGIN), bound_s)


@dataclass(frozen=True)
class ProbeOutcome:
    """What probe_phase proved: `closed` (nothing beats the bound), else the count `domains`
    holding every better partition; `probed`: it reached its fixed point; `solves`: LP
    solves spent; `floor_s`: the configuration's lower bound it proved (lp_floor)."""

    closed: bool
    domains: Domains | None
    probed: bool
    solves: int
    floor_s: float = 0.0


@dataclass(frozen=True)
class LpOutcome:
    """What lp_phase proved: `settled` (its LP floor reached the bound); `stalled`, the
    cutting-plane rounds it left when it stopped on a stall (0 otherwise)."""

    settled: bool
    stalled: int = 0


@dataclass(frozen=True)
class BranchOutcome:
    """What branch_phase proved: `closed` (every node's LP floor reaches the bound), else the
    `hull` of the nodes left open; `solves`: LP solves spent; `floor_s`: the configuration's
    lower bound it proved (lp_floor over the nodes left open)."""

    closed: bool
    hull: Domains | None
    solves: int
    floor_s: float = 0.0


def horizon_s(inputs: PartitionInputs) -> float:
    """An upper bound of any path's length plus the post time: every action once, every
    boundary crossed twice per micro-batch."""
    m = inputs.num_microbatches
    work = sum(
        f + max(bi) + w
        for f, bi, w in zip(inputs.fw_s, inputs.bw_input_s, inputs.bw_weight_s, strict=True)
    )
    lags = 2 * m * max(0, inputs.num_stages - 1) * max(inputs.p2p_s, default=0.0)
    return m * work + lags + sum(inputs.post_s) + 1e-9


class Collector:
    """The path cuts and scored partitions of one configuration's solve.

    Every partition a phase simulates goes through `consider`: its critical path becomes a
    cut (in `seeds`, which the LP reads, and in the CP-SAT model once it is built), a
    partition over the cap adds the memory rows it breaks to the model, and the best feasible
    one is kept in `result.best`. The phases share this one object instead of closures."""

    def __init__(self, inputs: PartitionInputs, seeds: list[PathCut], result: ConfigResult):
        self.inputs = inputs
        self.sched = schedule_of(inputs)
        self.seeds = seeds
        self.collected = set(seeds)
        self.result = result
        self.model: PartitionModel | None = None
        self.reference_s: float | None = None  # the model's time scale: the best hint's
        result.paths = seeds
        result.cuts = len(self.collected)

    def consider(self, part: Partition, known: Scored | None = None) -> Scored:
        """Score `part` (or take `known`, its score) and learn from it (class docstring)."""
        scored = known if known is not None else Scored(part, score(self.inputs, part))
        sc, result, model = scored.score, self.result, self.model
        _, cut = critical_path(self.sched, durations_of(sc))
        if cut not in self.collected:
            self.collected.add(cut)
            result.cuts += 1
            if model is not None:
                model.add_path_cut(cut)
        if model is not None and not sc.feasible:
            # the memory rows of the held points it breaks (model.seed_points starts with few)
            for r, peak in enumerate(sc.rank_peaks):
                if peak.point is not None and sc.rank_memory_bytes[r] > sc.cap_bytes:
                    model.add_memory_row(r, peak.point)
        self.seeds.append(cut)
        result.evaluated.append(scored)
        if sc.feasible and (result.best is None or sc.step_time_s < result.best.score.step_time_s):
            result.best = scored
        return scored

    def add_cut(self, cut: PathCut) -> bool:
        """Learn a path cut found without a partition (the LP's own point, separate_lp): in
        `seeds` and the CP-SAT model like a simulated partition's. False if it is known."""
        if cut in self.collected:
            return False
        self.collected.add(cut)
        self.result.cuts += 1
        if self.model is not None:
            self.model.add_path_cut(cut)
        self.seeds.append(cut)
        return True

    def cp_model(self, modes: tuple[RecomputeMode, ...], split: StageSplit) -> PartitionModel:
        """The CP-SAT model, built on first use (most configurations are settled by a floor
        before it) with every path cut collected so far and the count domains proven."""
        if self.model is None:
            inputs, result = self.inputs, self.result
            model = PartitionModel(
                inputs,
                modes=modes,
                split=split,
                horizon_s=horizon_s(inputs),
                reference_s=self.reference_s,
            )
            for cut in self.seeds:
                model.add_path_cut(cut)
            if result.domains is not None:
                model.add_count_bounds(counted_run(inputs), result.domains)
            self.model = model
        return self.model


@dataclass(frozen=True)
class SolveLimits:
    """How far one solve_config call may go: CP-SAT's `time_limit_s` (charged with its own
    wall time, or with `cpu_clock` its CPU time) and, if given, `time_left` (the driver's
    clock); `workers` and `seed` are CP-SAT's. `cpu_clock`: the driver's clock counts CPU
    time, so CP-SAT's solves are stopped and charged on CPU time too (model.CpuLimit), and a
    search does the same work whatever the machine's load."""

    time_limit_s: float = 10.0
    time_left: Callable[[], float] | None = None
    workers: int = 2
    seed: int = 0
    cpu_clock: bool = False

    def cpu(self, tuning: SearchTuning) -> CpuLimit | None:
        """How CP-SAT's solves are stopped on CPU time; None: on wall time."""
        return CpuLimit(tuning.cpu_poll_s, tuning.cpu_wall_factor) if self.cpu_clock else None


@dataclass(frozen=True)
class Known:
    """What earlier work on this configuration learned (all valid for any later, lower
    bound): `paths`, the path cuts of an earlier, capped call; `scored_hints`, hints already
    scored (with `descended`: the hill climb from them was run too, see improve_config);
    `domains`, an earlier call's count domains, and `probed`, whether probing reached its
    fixed point on them."""

    paths: tuple[PathCut, ...] = ()
    scored_hints: tuple[Scored, ...] = ()
    descended: bool = False
    domains: Domains | None = None
    probed: bool = False


def solve_config(
    inputs: PartitionInputs,
    *,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit = "any",
    bound_s: float | None = None,
    hints: tuple[Partition, ...] = (),
    known: Known = Known(),
    limits: SolveLimits = SolveLimits(),
    prove: bool = True,
    polish: bool = False,
    neighbours: bool = True,
    tuning: SearchTuning = TUNING,
    ties: bool = False,
) -> ConfigResult:
    """Find the partition with the lowest simulated step time under the cap, provably
    (module docstring): the phases in order, each settling it or handing on what it learned
    (heuristic_phase, floor_phase, lp_phase, probe_phase, branch_phase, cpsat_phase).
    `prove=False`: the LP's cutting planes and probing only, no branching and no CP-SAT
    (status FEASIBLE unless a floor settled it): their better partitions without the cost
    of a proof. `polish`: the hill climb's costlier moves from the best hint
    (_descend(polish=True)), even when `known.descended`. `neighbours`: see cpsat_phase.
    `ties` (objective bubble): once the optimum is proven, tie_phase picks among the
    partitions that tie it by the tie rule (tie_key)."""
    result = ConfigResult(status="UNKNOWN", best=None)
    seeds = seed_cuts(schedule_of(inputs))
    seeds += [cut for cut in dict.fromkeys(known.paths) if cut not in seeds]
    if bound_s is not None and _cut_settles(inputs, seeds, bound_s):
        result.paths, result.status = seeds, "BOUNDED"  # the whole-layer cut floor: no solve
        return result
    col = Collector(inputs, seeds, result)
    result.domains, result.probed = known.domains, known.probed
    hinted = (*known.scored_hints, *(Scored(h, score(inputs, h)) for h in hints))
    col.reference_s = min((sc.score.step_time_s for sc in hinted), default=None)
    heuristic_phase(
        col,
        modes,
        split,
        hinted,
        descend=not known.descended,
        polish=polish,
        time_left=limits.time_left,
        tuning=tuning,
        bound_s=bound_s,
    )
    limit = _bound(bound_s, result.best)
    if limit is not None and floor_phase(col, limit):
        return _finish(col, _settled(result, bound_s), modes, split, limits, tuning, ties=ties)
    # The LP floor (with its cutting planes, then probing and branching on block counts) may
    # settle it without CP-SAT. Its cutting planes simulate partitions that may break a
    # framework's stage split, so under one only the LP floor runs. A second call with
    # `known.paths` (a capped first pass) has had its LP rounds (their cuts are among the
    # known paths). No integer program runs between the LP and CP-SAT: inside the domains and
    # the branching's hull, CP-SAT settles what one would, faster.
    cells = inputs.num_stages * inputs.num_layers
    if limit is not None and cells <= tuning.lp_max_cells:
        rounds = tuning.lp_rounds if split == "any" and not known.paths else 0
        separate = separate_solves(inputs, tuning, hard=bool(known.paths))
        if _lp_settles(col, modes, split, bound_s, rounds, prove, polish, limits, tuning, separate):
            return _finish(col, _settled(result, bound_s), modes, split, limits, tuning, ties=ties)
    if not prove:  # the cheap phases only (the driver's visit of the improve pass's incumbent)
        result.status = "FEASIBLE" if result.best is not None else "UNKNOWN"
        return result
    status = cpsat_phase(col, modes, split, bound_s, limits, neighbours=neighbours, tuning=tuning)
    return _finish(col, status, modes, split, limits, tuning, ties=ties)


def _finish(
    col: Collector,
    status: ConfigStatus,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit,
    limits: SolveLimits,
    tuning: SearchTuning,
    *,
    ties: bool,
) -> ConfigResult:
    """The result with its `status`; with `ties` and a proven optimum, after tie_phase. Not
    for pp = 1: one rank runs every action back to back, so any recompute time lengthens
    the step and partitions that tie differ in no recompute time and no bubble (0)."""
    col.result.status = status
    if ties and status == "OPTIMAL" and col.inputs.pp > 1:
        tie_phase(col, modes, split, limits, tuning)
    return col.result


def heuristic_phase(
    col: Collector,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit,
    hinted: tuple[Scored, ...],
    *,
    descend: bool,
    polish: bool,
    time_left: Callable[[], float] | None,
    tuning: SearchTuning = TUNING,
    bound_s: float | None = None,
) -> None:
    """The scored hints, then (where the stage split is free) the memory climb from the
    fastest one where it is over the cap (_fitted) and the hill climb from the best
    feasible one: each partition through `col.consider`. Without `polish`, the hill climb
    runs only where its start is within tuning.descend_within of `bound_s`
    (_worth_climbing)."""
    for sc in hinted:
        col.consider(sc.partition, sc)
    if descend and split == "any":
        for sc in _fitted(col.inputs, hinted, modes, time_left, tuning):
            col.consider(sc.partition, sc)
    best = col.result.best
    descend = descend and best is not None and _worth_climbing(best, bound_s, tuning)
    if (descend or polish) and split == "any" and best is not None:
        for better in _descend(
            col.inputs, best, modes, time_left=time_left, polish=polish, tuning=tuning
        ):
            col.consider(better.partition, better)


def floor_phase(col: Collector, limit_s: float) -> bool:
    """True if the path-cut floor (bounds.cut_floor_s) or the whole-layer count domains
    (planner.search.domains) show that nothing beats `limit_s`; else the domains are kept in
    `col.result.domains` for the phases after."""
    inputs, result = col.inputs, col.result
    if _cut_settles(inputs, col.seeds, limit_s):
        return True
    result.domains = intersect(result.domains, whole_layer_domains(inputs, limit_s * (1 - REL_TOL)))
    return is_empty(result.domains)


def _lp_settles(
    col: Collector,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit,
    bound_s: float | None,
    rounds: int,
    prove: bool,
    polish: bool,
    limits: SolveLimits,
    tuning: SearchTuning,
    separate: int = 0,
) -> bool:
    """The LP phases in order (lp_phase, then probe_phase once per configuration, then,
    when proving, separate_lp with at most `separate` solves and probe_phase again, then
    the rounds a stalled lp_phase left and, when proving, probe_phase once more, then
    branch_phase);
    True if one shows nothing beats the bound. The domains they prove are kept in
    `col.result` for CP-SAT and later calls."""
    result, time_left = col.result, limits.time_left
    lp = CutLP(col.inputs, modes, cuts=col.seeds)

    def limit() -> float | None:
        return _bound(bound_s, result.best)

    shifts = tuning.lp_shift_rounds if polish else 0
    best = result.best
    near = (
        not polish
        and bound_s is not None
        and best is not None
        and best.score.step_time_s <= bound_s * (1 + tuning.lp_stall_within)
    )
    rounds_done = lp_phase(
        lp,
        col.seeds,
        limit,
        col.consider,
        time_left,
        rounds,
        result.domains,
        shifts,
        tuning,
        proven=result.prove_floor,
        stall=tuning.lp_stall if near else 0.0,
    )
    if rounds_done.settled:
        return True
    if split != "any":
        return False
    # Probed to its fixed point once per configuration: a later call (after the driver's
    # visit without proof or a capped first pass) starts from those domains and goes on to
    # the branching; probing cut short by its time share is resumed there.
    if not result.probed:
        probe = probe_phase(lp, limit, time_left, result.domains, tuning=tuning)
        result.solver_calls += probe.solves
        result.domains, result.probed = probe.domains, probe.probed
        result.prove_floor(probe.floor_s)
        if probe.closed:
            return True
    # When proving, what probing left open: the LP's own optimum's paths (separate_lp,
    # about one cutting-plane round's work in a first call), before the rounds a stall left
    # (one round's neighbours each): where the separation settles it, they are not needed.
    if prove and _separation_settles(col, lp, limit, time_left, separate, tuning):
        return True
    if rounds_done.stalled:
        # the rounds left, whose neighbours' paths and scores the branching and CP-SAT use
        # (a stalled floor does not mean no paths are missing)
        resumed = lp_phase(
            lp,
            col.seeds,
            limit,
            col.consider,
            time_left,
            rounds_done.stalled,
            result.domains,
            0,
            tuning,
            proven=result.prove_floor,
        )
        if resumed.settled:
            return True
        if prove and _probe_settles(col, lp, limit, time_left, tuning):
            return True  # probing once more, on the rounds' paths too
    if not prove:  # branching is a proof device: left to the call that proves
        return False
    best = result.best
    # the partition that sets the bound is this configuration's (tuning.branch_solves_own)
    if best is not None and (bound_s is None or best.score.step_time_s <= bound_s):
        own = min(tuning.branch_solves, tuning.branch_solves_own)
        tuning = replace(tuning, branch_solves=own)
    branch = branch_phase(
        lp, col.seeds, limit, col.consider, time_left, root=result.domains, tuning=tuning
    )
    result.solver_calls += branch.solves
    result.prove_floor(branch.floor_s)
    if not branch.closed and branch.hull is not None:
        result.domains = intersect(result.domains, branch.hull)
    return branch.closed


def _separation_settles(
    col: Collector,
    lp: CutLP,
    limit: Callable[[], float | None],
    time_left: Callable[[], float] | None,
    separate: int,
    tuning: SearchTuning,
) -> bool:
    """separate_lp (at most `separate` solves) inside the count domains (they hold every
    better partition, so the LP's value there is a floor), then probing again on the
    stronger LP, whose sides close where they did not before: True if either shows nothing
    beats the bound. Its paths serve the branching and CP-SAT after it."""
    result = col.result
    bound = limit()
    if separate <= 0 or bound is None:
        return False
    if result.domains is not None:
        lp.count_run(counted_run(col.inputs))
        lp.set_count_bounds(result.domains)
    point = lp.solve()
    if point is not None and point.value_s < math.inf:
        best = result.best
        if floor_is_the_proof(point.value_s, best, bound, tuning):
            separate = max(separate, tuning.lp_separate_solves)
        point = separate_lp(
            lp,
            point,
            col.add_cut,
            bound,
            separate,
            time_left,
            result.prove_floor,
            core=durations_of(best.score) if best is not None else None,
            core_share=tuning.lp_separate_core,
        )
    if result.domains is not None:
        lp.set_count_bounds(free_domains(col.inputs))  # the LP is shared with the branching
    if point is not None and point.reaches(bound):
        return True
    return _probe_settles(col, lp, limit, time_left, tuning)


def floor_is_the_proof(
    value_s: float, best: Scored | None, bound_s: float, tuning: SearchTuning
) -> bool:
    """The LP floor `value_s` inside the domains lies within tuning.lp_separate_far_within of
    the bound, and the configuration's best partition at least tuning.lp_separate_far times
    further above it: a partition under the bound would have to beat every one known by far
    more than the LP lacks, so the proof is most likely the floor's, and separate_lp gets its
    hard-proof budget (tuning.lp_separate_solves) in a first call too, before the branching
    and CP-SAT that would search for such a partition. The separation's solves close a few
    tenths of a percent at most, hence the window. Changes how far the separation goes,
    never what it proves (every cut is a path)."""
    if tuning.lp_separate_far <= 0 or best is None or value_s >= bound_s:
        return False
    gap = bound_s - value_s
    near = gap <= tuning.lp_separate_far_within * bound_s
    return near and best.score.step_time_s - bound_s >= tuning.lp_separate_far * gap


def _probe_settles(
    col: Collector,
    lp: CutLP,
    limit: Callable[[], float | None],
    time_left: Callable[[], float] | None,
    tuning: SearchTuning,
) -> bool:
    """probe_phase again from the count domains proven so far, on an LP that has gained
    cuts since: its sides close where they did not before. True if the domain closes."""
    result = col.result
    probe = probe_phase(lp, limit, time_left, result.domains, tuning=tuning)
    result.solver_calls += probe.solves
    result.domains = probe.domains
    result.prove_floor(probe.floor_s)
    return probe.closed


def cpsat_phase(
    col: Collector,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit,
    bound_s: float | None,
    limits: SolveLimits,
    *,
    neighbours: bool = True,
    tuning: SearchTuning = TUNING,
) -> ConfigStatus:
    """Steps 3-5 of the module docstring until CP-SAT proves or the time is out: the status.
    `neighbours`: simulate each decoded partition's one-boundary neighbours and rank shifts
    too (their paths are cuts the next solves would otherwise find one at a time)."""
    inputs, result = col.inputs, col.result
    budget = limits.time_limit_s

    def left() -> float:
        return min(budget, limits.time_left()) if limits.time_left is not None else budget

    while True:
        # Building the model is Python work per cut and stage that no limit interrupts, and
        # CP-SAT loads it before its own clock starts: not begun without model_build_margin x
        # a generous estimate left.
        model_s = tuning.model_build_s * len(col.collected) * inputs.num_stages  # build or load
        if left() <= (tuning.model_build_margin * model_s if col.model is None else 0.0):
            return "FEASIBLE" if result.best is not None else "UNKNOWN"
        model = col.cp_model(modes, split)
        limit = _bound(bound_s, result.best)
        if limit is not None:
            model.add_objective_bound(_units(limit, model.scale))
        if result.best is not None:
            model.add_hint(result.best.partition)
        # With a bound, any partition under it will do (it is simulated next): CP-SAT solves
        # a feasibility problem, which it proves or refutes much faster than the minimum.
        # CP-SAT's clock starts once it has loaded the model (about as long as building it)
        out = model.solve(
            time_limit_s=max(left() - model_s, 1e-3),
            workers=limits.workers,
            seed=limits.seed,
            feasibility=limit is not None,
            cpu=limits.cpu(tuning),
        )
        result.solver_calls += 1
        result.solver_s += out.time_s
        budget -= out.time_s
        if out.status == "INFEASIBLE":
            return _settled(result, bound_s)
        if out.partition is None:
            return "FEASIBLE" if result.best is not None else "UNKNOWN"
        scored = col.consider(out.partition)
        if neighbours and split == "any":  # a move could break a framework's stage split
            # CP-SAT's next partitions differ from it in how ranks split their blocks between
            # chunks (the domains often fix every rank's count)
            near_by = (
                *_neighbours(out.partition),
                *rank_shifts(out.partition, inputs.stage_rank, single=True),
            )
            for near in near_by:
                if left() <= 0:
                    break
                col.consider(near)
        limit = _bound(bound_s, result.best)
        if not scored.score.feasible or (
            limit is not None
            and model.lower_bound_units(out.partition) <= _units(limit, model.scale)
        ):
            model.add_no_good(out.partition)


def tie_phase(
    col: Collector,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit,
    limits: SolveLimits,
    tuning: SearchTuning = TUNING,
) -> None:
    """The tie rule (tie_key) on a configuration whose optimum `col.result.best` is proven:
    `col.result.best` becomes the preferred of every partition that ties it.

    A fresh CP-SAT model (the proof's model bounds T + P below the optimum, and its count
    domains hold only better partitions) with every path cut collected, T + P at most the tie
    ceiling (the optimum x (1 + REL_TOL), rounded up: a cut's coefficients are rounded down,
    so no tie is cut off) and the objective R, a lower bound of the recompute time
    (PartitionModel.minimise_recompute). Each solve gives the least-R partition not yet
    excluded; it is simulated (col.consider: a slower one adds its critical path, one over
    the cap its memory rows) and excluded by a no-good. Once the least R left exceeds the
    least recompute among the ties found (by more than a margin for rounding), no
    partition left is preferred, and those enumerated include every tie of least recompute:
    the preferred one is among them. Stops early after tuning.tie_solves solves or when the
    time is out; `best` is then the preferred of the ties found, still time-optimal."""
    inputs, result = col.inputs, col.result
    best = result.best
    if best is None:
        return
    fastest = best.score.step_time_s
    # the partitions `preferred` picks from: every feasible one simulated that may tie
    found = [sc for sc in (best, *result.evaluated) if ties_with(sc.score.step_time_s, fastest)]
    model = PartitionModel(
        inputs,
        modes=modes,
        split=split,
        horizon_s=horizon_s(inputs),
        reference_s=col.reference_s or fastest,
    )
    for cut in col.seeds:
        model.add_path_cut(cut)
    col.model = model  # col.consider adds what it learns here now
    model.add_objective_bound(math.ceil(fastest * (1 + REL_TOL) * model.scale))
    unit = model.minimise_recompute()
    model.add_hint(best.partition)
    budget = limits.time_limit_s - result.solver_s

    def left() -> float:
        return min(budget, limits.time_left()) if limits.time_left is not None else budget

    for _ in range(tuning.tie_solves):
        if left() <= 0:
            break
        out = model.solve(
            time_limit_s=left(),
            workers=limits.workers,
            seed=limits.seed,
            cpu=limits.cpu(tuning),
        )
        result.solver_calls += 1
        result.solver_s += out.time_s
        budget -= out.time_s
        if out.partition is None:  # INFEASIBLE: every tie is known (or the time is out)
            break
        least = preferred(inputs, found)
        assert least is not None  # `best` is feasible
        slack = inputs.num_layers + 1  # a margin for the rounding of the float sums
        if (
            out.status == "OPTIMAL"
            and out.objective_units is not None
            and out.objective_units > recompute_s(inputs, least.partition.modes) * unit + slack
        ):
            break
        scored = col.consider(out.partition)
        model.add_no_good(out.partition)
        if scored.score.feasible:
            found.append(scored)
    result.best = preferred(inputs, found)


def improve_config(
    inputs: PartitionInputs,
    *,
    modes: tuple[RecomputeMode, ...],
    hints: tuple[Partition, ...],
    descend: bool = True,
    time_left: Callable[[], float] | None = None,
    tuning: SearchTuning = TUNING,
    bound_s: float | None = None,
) -> list[Scored]:
    """The heuristic part of solve_config alone: the hints scored and (with `descend`) the
    memory climb (_fitted) and the hill climb from the best feasible one. Cheap next to a
    proof; run on every configuration first, it finds the incumbent that lets the floors
    prune most of the others. Pass the result to solve_config as `scored_hints` with
    `descend=False`. With `bound_s` (the incumbent's step time), the hill climb runs only
    where it may reach it (_worth_climbing)."""
    out = [Scored(h, score(inputs, h)) for h in hints]
    if descend:
        out += _fitted(inputs, out, modes, time_left, tuning)
    feasible = [sc for sc in out if sc.score.feasible]
    if descend and feasible:
        best = min(feasible, key=lambda sc: sc.score.step_time_s)
        if not _worth_climbing(best, bound_s, tuning):
            return out
        out += _descend(inputs, best, modes, time_left=time_left, tuning=tuning)
    return out


def _fitted(
    inputs: PartitionInputs,
    scored: Iterable[Scored],
    modes: tuple[RecomputeMode, ...],
    time_left: Callable[[], float] | None,
    tuning: SearchTuning,
) -> list[Scored]:
    """With one recompute mode for every layer (the modes cannot buy memory), where the
    fastest of the `scored` hints is over the cap and faster than every one that fits: the
    feasible partition the memory climb from it reaches (_fit_climb), else nothing.

    With several modes the repair buys the memory with recompute, and the hints it fits are
    near what the climb reaches: in the planning benchmark's rows with three modes its
    fits were 0.1-5.8 % above the incumbent, at up to an eighth of the search's time. Not
    gated on the bound as the hill climb is (_worth_climbing): how far the fastest hint is
    from the incumbent says little of where the climb ends (it moves layers off the ranks
    over the cap, which may be the critical ones: Qwen3-30B-A3B in _fit_climb, 2.3 % above
    the incumbent before, 0.2 % after)."""
    if len(modes) > 1:
        return []
    hints = list(scored)
    over = [sc for sc in hints if not sc.score.feasible]
    if not over:
        return []
    fastest = min(over, key=lambda sc: sc.score.step_time_s)
    fits = [sc.score.step_time_s for sc in hints if sc.score.feasible]
    if fits and min(fits) <= fastest.score.step_time_s:
        return []
    return _fit_climb(inputs, fastest, time_left=time_left, tuning=tuning)


def _overflow_bytes(sc: PartitionScore) -> float:
    """The bytes by which the ranks over the cap exceed it, summed."""
    return sum(max(0.0, m - sc.cap_bytes) for m in sc.rank_memory_bytes)


def _fit_climb(
    inputs: PartitionInputs,
    start: Scored,
    *,
    time_left: Callable[[], float] | None,
    tuning: SearchTuning,
) -> list[Scored]:
    """From a partition over the cap with one recompute mode for every layer, the move (one
    boundary by one layer, or a rank shift, one rank alone included; the layers keep their
    mode) that lowers the ranks' summed overflow, the least overflow then the least step
    time, until one fits (at most tuning.descend_rounds moves): [that partition], or []
    where no move lowers it.

    Why: where memory binds and the modes cannot buy it (one recompute mode for every
    layer, a framework's), the balanced splits are over the cap on the ranks whose stages
    hold the most micro-batches in flight (1F1B's first, an interleaved rank's early
    chunks) and the splits that fit move layers from those stages to the ones holding the
    fewest; the rank-balanced hints that fit keep every rank's chunks even and pay for it.
    Qwen3-30B-A3B on 16 H100s under torchtitan, tp 2 pp 4 vpp 5: the fastest hint is 2.3 %
    above the incumbent and over the cap, the best that fits 9.6 %; this climb fits in two
    moves at 0.2 %, and the hill climb from there reaches the optimum, 0.1 % below."""
    cur, over = start, _overflow_bytes(start.score)
    for _ in range(tuning.descend_rounds):
        step: tuple[float, float, Scored] | None = None
        moves = itertools.chain(
            _neighbours(cur.partition), rank_shifts(cur.partition, inputs.stage_rank, single=True)
        )
        for near in moves:
            if time_left is not None and time_left() <= 0:
                return []
            sc = Scored(near, score(inputs, near))  # one mode: nothing to repair
            key = (_overflow_bytes(sc.score), sc.score.step_time_s)
            if key[0] < over and (step is None or key < step[:2]):
                step = (*key, sc)
        if step is None:
            return []
        over, cur = step[0], step[2]
        if cur.score.feasible:
            return [cur]
    return []


def _worth_climbing(best: Scored, bound_s: float | None, tuning: SearchTuning) -> bool:
    """Whether the hill climb from `best` may find a partition that matters: there is no
    bound yet, or `best` is within tuning.descend_within of it. A heuristic of speed only:
    a configuration not climbed is still settled by its floors, cutting planes and CP-SAT,
    which find any better partition it holds; what it saves is the climb's scores (one per
    neighbour and step) on configurations whose hints are far behind the incumbent."""
    if bound_s is None:
        return True
    return best.score.step_time_s <= bound_s * (1 + tuning.descend_within)


def lp_phase(
    lp: CutLP,
    seeds: list[PathCut],
    limit: Callable[[], float | None],
    consider: Callable[[Partition], Scored],
    time_left: Callable[[], float] | None = None,
    rounds: int = TUNING.lp_rounds,
    domains: Domains | None = None,
    shift_rounds: int = 0,
    tuning: SearchTuning = TUNING,
    proven: Callable[[float], None] | None = None,
    stall: float = 0.0,
) -> LpOutcome:
    """Cutting planes on the LP relaxation (planner.search.cutlp): solve the LP, round its
    fractional split to a partition (modes re-picked for the cap), simulate it and its
    one-boundary neighbours, add their critical paths (to the LP and, through `consider`, to
    the CP-SAT model), repeat. True if the LP floor reaches the bound (nothing can beat it);
    stops when a round adds no new path or after `rounds` (0: the LP floor alone). The
    partitions it simulates may also improve the incumbent. Each round simulates first the
    neighbours that move the boundaries whose LP position is least clear (fraction nearest
    one half): all of them while moves x schedule actions stays under
    tuning.lp_action_budget, at least tuning.lp_moves. `domains`: count domains holding
    every better partition (the LP is solved inside them). In the first `shift_rounds`
    rounds the rounded point's rank shifts (rank_shifts(single=True)) are simulated too:
    the paths of other chunk splits of the same rank counts, which CP-SAT would otherwise
    find one solve at a time. Only for the incumbent's configuration
    (solve_config(polish=True)), tuning.lp_shift_rounds rounds: there they serve the proof;
    in every round, or in every configuration's LP phase, the extra rows slow the LP more
    than they help. `proven` is given each LP solve's lp_floor (the LP holds every better
    partition: it is solved inside `domains`). `stall` > 0: the rounds stop after one that
    raised the LP floor by less than that share of the gap it had left to the bound
    (tuning.lp_stall; solve_config passes it where the configuration's best partition is
    near the bound), and the outcome says how many rounds they left (the caller resumes
    them if probing does not settle the configuration); stopping early only leaves the
    floor lower, never wrong."""
    inputs, modes = lp.inputs, lp.modes
    for cut in seeds:
        lp.add_cut(cut)
    if domains is not None:
        lp.count_run(counted_run(inputs))
        lp.set_count_bounds(domains)
    n = inputs.num_layers
    moves = _moves(inputs, tuning)
    last = -math.inf  # the LP value of the round before
    for done in range(rounds + 1):
        bound = limit()
        if bound is None or (time_left is not None and time_left() <= 0):
            return LpOutcome(False)
        point = lp.solve()
        if point is None or point.value_s == math.inf:  # an infeasible LP: CP-SAT decides
            return LpOutcome(False)
        if point.reaches(bound):
            return LpOutcome(True)
        if proven is not None:
            proven(lp_floor(point.value_s, bound))
        if done == rounds:
            return LpOutcome(False)
        if stall > 0 and point.value_s - last < stall * (bound - last):
            return LpOutcome(False, rounds - done)  # stalled: the rounds no longer move it
        last = point.value_s
        part = repaired(inputs, rounded_bounds(point.stage_layers, n), modes)
        order = _unclear_first(point.stage_layers)
        shifts = rank_shifts(part, inputs.stage_rank, single=True) if done < shift_rounds else []
        fresh = sum(
            _probe(lp, seeds, consider, near)[1]
            for near in (part, *_neighbours(part, order, moves), *shifts)
            if time_left is None or time_left() > 0
        )
        if not fresh:  # stalled: the other roundings of the unclear boundaries
            for split in _roundings(part, point.stage_layers, order[: tuning.lp_moves]):
                if time_left is not None and time_left() <= 0:
                    break
                fresh += _probe(lp, seeds, consider, repaired(inputs, split, modes))[1]
        if not fresh:
            return LpOutcome(False)
    return LpOutcome(False)


def separate_lp(
    lp: CutLP,
    point: LpPoint,
    add_cut: Callable[[PathCut], bool],
    bound_s: float,
    solves: int,
    time_left: Callable[[], float] | None = None,
    proven: Callable[[float], None] | None = None,
    core: StageDurations | None = None,
    core_share: float = 0.0,
) -> LpPoint | None:
    """Cutting planes at the LP's own optimum (Kelley's method): simulate the schedule under
    the optimum's fractional stage durations (LpPoint.durations); where its critical path is
    longer than T, that path is a cut the optimum breaks, so add it (to `lp` and, through
    `add_cut`, to the collected cuts) and solve again; at most `solves` times, until no path
    is longer than T (then the LP's value is the least step time over its fractional region,
    as the simulator measures it), the LP reaches `bound_s`, or the time is out. Every path
    of the schedule is a lower bound of every partition's makespan (planner.search.paths),
    whatever durations found it, so every cut added is valid and every LP value a floor
    (`proven` gets each one's lp_floor). Returns the last point (None: GLOP failed).

    `core` (the durations of a real partition: the configuration's best) with `core_share`
    > 0: each solve also gets the critical path at the durations between the optimum's and
    the core's (_mixed; in-out separation) where the optimum breaks it. The optimum's own
    path cuts off little more than the optimum, and the next optimum sits beside it
    (Kelley's method creeps); a path long at a point nearer a real partition is long over
    more of the LP's region. Which durations found a path does not matter to its validity.

    Why: the rounding rounds only add the paths of whole partitions near the optimum; where
    stages hold about two layers each, the fractional optimum's own critical path (a fill
    or drain through stages that the LP made light) is far from all of theirs, and the LP
    stays below it."""
    schedule = schedule_of(lp.inputs)
    for _ in range(solves):
        d = point.durations
        if d is None or point.reaches(bound_s) or (time_left is not None and time_left() <= 0):
            break
        t = point.makespan_s * (1 + SEPARATION_TOL)
        _, own = critical_path(schedule, d)
        found = [own] if own.length_s(d) > t else []
        if core is not None and core_share > 0:
            _, cut = critical_path(schedule, _mixed(d, core, core_share))
            if cut.length_s(d) > t:
                found.append(cut)
        fresh = 0
        for cut in found:
            if lp.add_cut(cut):
                add_cut(cut)
                fresh += 1
        if not fresh:
            break  # no path of the optimum's durations is longer than T: nothing to add
        nxt = lp.solve()
        if nxt is None or nxt.value_s == math.inf:
            return nxt
        point = nxt
        if proven is not None:
            proven(lp_floor(point.value_s, bound_s))
    return point


def _mixed(d: StageDurations, core: StageDurations, share: float) -> StageDurations:
    """The durations (1 - share) d + share core, stage by stage (p2p: d's)."""
    keep = 1.0 - share

    def mix(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(keep * x + share * y for x, y in zip(a, b, strict=True))

    return StageDurations(
        fw_s=mix(d.fw_s, core.fw_s),
        bw_s=mix(d.bw_s, core.bw_s),
        w_s=mix(d.w_s, core.w_s),
        p2p_s=d.p2p_s,
    )


# separate_lp stops once no path of the LP optimum's durations exceeds T by more than this
# relative margin (a cut violated by less raises the LP by less).
SEPARATION_TOL = 1e-5


def branch_phase(
    lp: CutLP,
    seeds: list[PathCut],
    limit: Callable[[], float | None],
    consider: Callable[[Partition], Scored],
    time_left: Callable[[], float] | None = None,
    root: Domains | None = None,
    tuning: SearchTuning = TUNING,
) -> BranchOutcome:
    """Branch and bound on how many layers of the largest run (a GPT's blocks) each pipeline
    rank holds, then each stage, with the cut LP at every node. True if every node's LP floor
    reaches the bound: nothing can beat it.

    Why: the LP lets a rank hold 7.5 of 60 blocks over 8 ranks, and that half block is often
    the whole gap between its floor and the incumbent (76.1B's tp = 2 pp = 8 zbv: LP 0.971 of
    the incumbent, CP-SAT 3 s to refute it). Whole layers force some rank to hold at least
    one more: at a node whose LP holds c_r layers on rank r (lo_r <= c_r <= hi_r, sum c_r =
    N), every partition in the node has some rank with more than floor(c_r) (else its counts
    would sum to at most sum floor(c_r) < N), so the children {count_r >= floor(c_r) + 1}, one
    per rank, cover the node (they may overlap; a proof only needs a cover), and each cuts off
    the LP point. There each LP floor is a lower bound: with the same cut rows it reached 1.005
    - 1.046 of the incumbent in 8 solves of 3 ms. Where every rank's count is whole, the
    stage whose count is furthest from whole splits the node in two (count <= floor, >=
    ceil). Each node first runs up to tuning.branch_rounds cutting-plane rounds (its rounded point
    simulated, its critical path added: valid at every node). A node whose counts are all
    whole stays open (nothing to branch on); so do the nodes left after tuning.branch_solves LP
    solves or when the time is up. Returns (True, _) if every node closed, else (False, the
    hull of the open nodes): every better partition lies in an open node, so in their hull,
    which CP-SAT and later calls start from (529.6B's winner, pp = 21 zbv: the branching had
    given up at its first whole node and started over on every visit).

    The root, where it does not close, is split by its rank-count vectors instead
    (vector_children) where they are few: whole layers make the LP's half blocks on two
    ranks a choice of which ranks hold the smaller count, and each vector's LP, with every
    rank's count fixed, sits far above the root's. Every child's LP is solved before any is
    branched, so the floor proven is the least of theirs."""
    inputs, modes = lp.inputs, lp.modes
    g = counted_run(inputs)
    total, pp, n = layer_runs(inputs)[g].count, inputs.pp, inputs.num_layers
    if pp < 2:
        return BranchOutcome(False, root, 0)
    lp.count_run(g)
    time_left = _share(time_left, tuning.branch_share) if time_left is not None else None
    free = free_domains(inputs)
    # every node with a lower bound of its partitions' step times (its parent's LP value
    # until its own LP is solved): the least over the nodes left open is the floor proven
    first = root if root is not None else free  # the probing phase's domains
    stack = [(first, 0.0)]
    solves = 0
    open_nodes: list[tuple[Domains, float]] = []  # whole counts everywhere: nothing to branch on

    def unfinished(bound: float | None, *nodes: tuple[Domains, float]) -> BranchOutcome:
        left = [*open_nodes, *nodes, *stack]
        floor = 0.0 if bound is None else min([bound, *(low for _, low in left)])
        return BranchOutcome(False, _hull([node for node, _ in left]), solves, floor)

    try:
        while stack:
            node, low = stack.pop()
            lp.set_count_bounds(node)
            point = None
            for _ in range(max(1, tuning.branch_rounds)):
                bound = limit()
                if (
                    bound is None
                    or solves >= tuning.branch_solves
                    or (time_left is not None and time_left() <= 0)
                ):
                    return unfinished(bound, (node, low))
                point = lp.solve()
                solves += 1
                if point is None:
                    return unfinished(bound, (node, low))
                if point.reaches(bound):
                    point = None  # closed (an infeasible node too: its value is inf)
                    break
                low = max(low, lp_floor(point.value_s, bound))
                part = repaired(inputs, rounded_bounds(point.stage_layers, n), modes)
                if not _probe(lp, seeds, consider, part)[1]:
                    break
            if point is None:
                continue
            vectors = None
            if node is first and (bound := limit()) is not None:
                vectors = vector_children(inputs, node, bound, tuning)
            if vectors is not None:
                # each vector's LP first: the floor proven is the least of theirs, not the
                # root's, even where the branching below them is cut short
                kept = []
                for child in vectors:
                    child_low, bound = low, limit()
                    if (
                        bound is not None
                        and solves < tuning.branch_solves
                        and (time_left is None or time_left() > 0)
                    ):
                        lp.set_count_bounds(child)
                        point = lp.solve()
                        solves += 1
                        if point is not None and point.reaches(bound):
                            continue  # no better partition has these rank counts
                        if point is not None:
                            child_low = max(low, lp_floor(point.value_s, bound))
                    kept.append((child, child_low))
                # the lowest floor is popped first: it bounds the configuration
                stack.extend(sorted(kept, key=lambda item: -item[1]))
                continue
            children = branch_children(node, point.rank_counts, point.run_stage_counts, total)
            if children is None:
                open_nodes.append((node, low))
            else:
                stack.extend((child, low) for child in children)
        if open_nodes:
            return unfinished(limit())
        return BranchOutcome(True, None, solves)
    finally:
        lp.set_count_bounds(free)  # the LP is shared with the phases after


def vector_children(
    inputs: PartitionInputs, node: Domains, bound_s: float, tuning: SearchTuning
) -> list[Domains] | None:
    """A cover of `node` by its rank-count vectors (domains.rank_count_vectors: every
    partition in `node` below the bound has its per-rank counts among them), one child per
    vector with each rank's count fixed; None where there are more than
    tuning.branch_vectors of them, the floors do not apply or the only child is `node`
    (then the branching's own cover, branch_children, splits it). No vector: nothing below the
    bound (an empty cover)."""
    if tuning.branch_vectors < 2:
        return None
    pp = inputs.pp
    vectors = rank_count_vectors(inputs, node, bound_s * (1 - REL_TOL), tuning.branch_vectors)
    if vectors is None:
        return None
    children = [(*((d, d) for d in vector), *node[pp:]) for vector in vectors]
    return None if children == [node] else children


def free_domains(inputs: PartitionInputs) -> Domains:
    """Count domains that bound nothing: every rank and stage in [0, the counted run's size]."""
    total = layer_runs(inputs)[counted_run(inputs)].count
    return tuple((0, total) for _ in range(inputs.pp + inputs.num_stages))


def _hull(nodes: list[Domains]) -> Domains:
    """The smallest domains holding every node's."""
    return tuple(
        (min(lo for lo, _ in cells), max(hi for _, hi in cells))
        for cells in zip(*nodes, strict=True)
    )


def probe_phase(
    lp: CutLP,
    limit: Callable[[], float | None],
    time_left: Callable[[], float] | None = None,
    start: Domains | None = None,
    tuning: SearchTuning = TUNING,
) -> ProbeOutcome:
    """Probing on the counted run's layers per rank and per stage (the rows of
    branch_phase), with the cut LP: for each count k at the LP point's value c_k, the LP
    with count_k >= floor(c_k) + 1 and with count_k <= ceil(c_k) - 1; a side whose LP floor
    reaches the bound holds no better partition, so the domain of k shrinks to the other
    side. Repeated while a domain shrinks (each shrink moves the LP point). Returns closed
    if the whole domain closes (nothing beats the bound), else the domains (`start` if none
    shrank); every better partition lies inside them, whatever bound at or below this one is
    asked later. `probed` says whether it reached a fixed point (no domain shrinks) rather
    than its share of the time or tuning.probe_solves.

    A side is not solved where the LP already has a point there that misses the bound: an
    earlier probe's optimum p (value below the bound, within the current domains) with
    count_k on that side is feasible for that side's LP, whose optimum is then at most p's
    and cannot reach the bound either. Leaving a side unprobed only leaves a domain wider,
    which holds every better partition all the same. The domains found may still differ
    from those of probing every side: where the LP's optimum is not unique, which optimal
    point the warm re-solve returns depends on the solves before it, and the sides probed
    next are those around that point.

    Why: the branching's cover splits a node into one child per rank, and its tree grows
    with pp; probing shrinks every domain at once and keeps what it learns. 145.6B's winner
    (tp = 4 pp = 8 zbv, LP 0.995 of the optimum): every rank's count and 14 of 16 stage
    counts fixed in 140 solves, the LP 0.9998 inside them, and CP-SAT given those domains
    refutes a better partition in a small part of the search it needs without them."""
    inputs = lp.inputs
    if inputs.pp < 2:
        return ProbeOutcome(False, start, False, 0)
    g = counted_run(inputs)
    total = layer_runs(inputs)[g].count
    lp.count_run(g)
    free: Domains = tuple((0, total) for _ in range(inputs.pp + inputs.num_stages))
    dom = list(start if start is not None else free)
    time_left = _share(time_left, tuning.probe_share) if time_left is not None else None
    solves = 0
    probed = False
    floor = 0.0  # lp_floor of the LP inside `dom`: every better partition lies in it

    def closes(domains: list[tuple[int, int]], bound: float) -> tuple[bool, LpPoint | None]:
        nonlocal solves
        lp.set_count_bounds(tuple(domains))
        point = lp.solve()
        solves += 1
        if point is None:
            return False, None
        return point.reaches(bound), point

    def spent() -> bool:
        return solves >= tuning.probe_solves or (time_left is not None and time_left() <= 0)

    # the count vectors and values of the probes' optima that missed the bound, each inside
    # the current domains (up to POINT_SLACK): a side one of them lies on is not solved
    missed: list[tuple[tuple[float, ...], float]] = []

    emptied = False  # the last side that closed had no LP point at all (infeasible)
    checked = False  # dom_closes has solved `dom` in this pass already

    def side_closes(k: int, lo: int, hi: int, bound: float) -> bool:
        """Whether the LP with count_k in [lo, hi] (the other counts in `dom`) reaches the
        bound; False without a solve where a kept point lies there."""
        nonlocal emptied
        for counts, value in missed:
            if lo - POINT_SLACK <= counts[k] <= hi + POINT_SLACK and value < bound * (1 + MARGIN):
                return False
        shut, point = closes([*dom[:k], (lo, hi), *dom[k + 1 :]], bound)
        if not shut and point is not None:
            missed.append(((*point.rank_counts, *point.run_stage_counts), point.value_s))
        emptied = shut and point is not None and point.value_s == math.inf
        return shut

    def dom_closes(bound: float) -> bool:
        """After a side whose LP was infeasible shrank `dom`: whether the LP inside `dom`
        reaches the bound. Once the domains leave the LP no point (their counts cannot sum
        to the layers, say), every side of every later count is infeasible too and would
        close one at a time until some domain empties: one solve proves the same."""
        nonlocal checked
        if not emptied or checked or spent():
            return False
        checked = True
        shut, point = closes(dom, bound)
        if not shut and point is not None:  # inside `dom`: it spares the sides it lies on
            missed.append(((*point.rank_counts, *point.run_stage_counts), point.value_s))
        return shut

    def narrow(k: int) -> None:
        """Keep only the points inside dom[k] (it has just shrunk)."""
        lo, hi = dom[k]
        missed[:] = [p for p in missed if lo - POINT_SLACK <= p[0][k] <= hi + POINT_SLACK]

    try:
        while not spent():
            bound = limit()
            if bound is None:
                break
            shut, point = closes(dom, bound)
            if shut:
                return ProbeOutcome(True, tuple(dom), False, solves)
            if point is None:
                break
            checked = False
            floor = max(floor, lp_floor(point.value_s, bound))
            values = (*point.rank_counts, *point.run_stage_counts)
            shrunk = False
            for k, c in enumerate(values):
                lo, hi = dom[k]
                up = min(hi, max(lo, math.floor(c + 1e-9))) + 1  # count_k >= up closes?
                if up <= hi and not spent() and side_closes(k, up, hi, bound):
                    dom[k] = lo, hi = (lo, up - 1)
                    narrow(k)
                    shrunk = True
                    if dom_closes(bound):
                        return ProbeOutcome(True, tuple(dom), False, solves)
                down = max(lo, min(hi, math.ceil(c - 1e-9))) - 1  # count_k <= down closes?
                if down >= lo and not spent() and side_closes(k, lo, down, bound):
                    dom[k] = (down + 1, hi)
                    narrow(k)
                    shrunk = True
                    if dom_closes(bound):
                        return ProbeOutcome(True, tuple(dom), False, solves)
                if dom[k][0] > dom[k][1]:  # both sides closed: nothing better anywhere
                    return ProbeOutcome(True, tuple(dom), False, solves)
            if not shrunk:
                # a fixed point: nothing more to learn at this bound (unless the round was
                # cut short by the budget)
                probed = not spent()
                break
    finally:
        lp.set_count_bounds(free)  # the LP is shared with the phases after
    kept = tuple(dom) if tuple(dom) != free else start
    return ProbeOutcome(False, kept, probed, solves, floor)


# How far (in layers) an LP point's count may lie outside a domain and still count as inside
# it for probe_phase's skipped sides (GLOP meets bounds to its primal tolerance; counts are
# whole numbers of layers, so this moves no side).
POINT_SLACK = 1e-6


def branch_children(
    node: tuple[tuple[int, int], ...],
    rank_counts: tuple[float, ...],
    stage_counts: tuple[float, ...],
    total: int,
) -> list[tuple[tuple[int, int], ...]] | None:
    """A cover of `node` (per rank, then per stage, (lo, hi) of the counted run's layers)
    that cuts off the LP point (branch_phase); None if its counts are all whole."""
    pp = len(rank_counts)

    def narrowed(k: int, lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
        return [(*node[:k], (lo, hi), *node[k + 1 :])] if lo <= hi else []

    floors = [
        max(lo, min(hi, math.floor(c + 1e-9)))
        for c, (lo, hi) in zip(rank_counts, node[:pp], strict=True)
    ]
    if sum(floors) < total:  # some rank holds more than its floor
        return [child for r in range(pp) for child in narrowed(r, floors[r] + 1, node[r][1])]
    frac = [abs(c - round(c)) for c in stage_counts]
    s = max(range(len(frac)), key=frac.__getitem__)
    if frac[s] <= 1e-6:
        return None
    (lo, hi), c = node[pp + s], stage_counts[s]
    return [
        *narrowed(pp + s, lo, min(hi, math.floor(c))),
        *narrowed(pp + s, max(lo, math.ceil(c)), hi),
    ]


def _probe(
    lp: CutLP, seeds: list[PathCut], consider: Callable[[Partition], Scored], part: Partition
) -> tuple[Scored, int]:
    """Simulate `part` (`consider` appends its critical path to `seeds` and to the CP-SAT
    model) and add the new cuts to `lp`; returns its score and how many cuts were new there."""
    before = len(seeds)
    scored = consider(part)
    return scored, sum(lp.add_cut(cut) for cut in seeds[before:])


def separate_solves(inputs: PartitionInputs, tuning: SearchTuning, *, hard: bool) -> int:
    """LP solves for separate_lp in a proving call: tuning.lp_separate_solves in a hard proof
    (a configuration an earlier, capped call left unsettled); in a first call as many as keep
    their work under tuning.lp_action_budget (the simulation work of one cutting-plane round,
    _moves), each solve counted as one simulation of the schedule (its actions) and one LP
    re-solve (its cells, stages x layers). Where the configuration is small, its LP
    optimum's own fill and drain (the p2p zig-zag of a short pipeline, stages of about two
    layers) are what the LP misses, and tens of cheap solves settle it before any
    branching; where it is large, the time goes to probing and the branching's floors
    first, and the separation to the hard proof."""
    if hard:
        return tuning.lp_separate_solves
    work = num_actions(schedule_of(inputs)) + inputs.num_stages * inputs.num_layers
    return min(tuning.lp_separate_solves, tuning.lp_action_budget // max(1, work))


def _share(time_left: Callable[[], float], share: float) -> Callable[[], float]:
    """Time left within `share` of what `time_left` says now."""
    stop = time_left() * (1 - share)
    return lambda: time_left() - stop


def _moves(inputs: PartitionInputs, tuning: SearchTuning = TUNING) -> int:
    """Neighbours to simulate per cutting-plane round: as many as keep moves x schedule
    actions under tuning.lp_action_budget, at least tuning.lp_moves."""
    actions = num_actions(schedule_of(inputs))
    return max(tuning.lp_moves, tuning.lp_action_budget // max(1, actions))


def _roundings(
    part: Partition, stage_layers: tuple[float, ...], boundaries: list[int]
) -> list[tuple[int, ...]]:
    """Splits that round one more of the LP's cumulative counts the other way (down instead
    of up or up instead of down), the first boundary of `boundaries` first, then two."""
    cum = list(itertools.accumulate(stage_layers))
    b = part.bounds
    other = {}
    for s in boundaries:
        alt = math.floor(cum[s - 1]) if b[s] > cum[s - 1] else math.ceil(cum[s - 1])
        if b[s - 1] < alt < b[s + 1] and alt != b[s]:
            other[s] = alt
    out = []
    keys = list(other)
    for s in keys:
        out.append((*b[:s], other[s], *b[s + 1 :]))
    for s, t in itertools.pairwise(keys):
        if abs(s - t) > 1:
            nb = list(b)
            nb[s], nb[t] = other[s], other[t]
            out.append(tuple(nb))
    return out


def _unclear_first(stage_layers: tuple[float, ...]) -> list[int]:
    """Inner boundaries 1 .. S-1 by how close the LP's cumulative layer count before them is
    to a half (the roundings most likely to be wrong first)."""
    cum = list(itertools.accumulate(stage_layers))
    return sorted(range(1, len(stage_layers)), key=lambda s: abs(cum[s - 1] % 1.0 - 0.5))


def _cut_settles(inputs: PartitionInputs, cuts: list[PathCut], limit_s: float) -> bool:
    """No partition beats `limit_s` by more than the tolerance (bounds.cut_floor_s)."""
    floor = cut_floor_s(inputs, cuts)
    return floor is not None and floor >= limit_s * (1 - REL_TOL)


def _settled(result: ConfigResult, bound_s: float | None) -> ConfigStatus:
    """Status once nothing can beat min(incumbent, bound)."""
    if result.best is not None and (bound_s is None or result.best.score.step_time_s <= bound_s):
        return "OPTIMAL"
    return "BOUNDED" if bound_s is not None else "INFEASIBLE"


def _bound(bound_s: float | None, best: Scored | None) -> float | None:
    values = [v for v in (bound_s, best.score.step_time_s if best else None) if v is not None]
    return min(values) if values else None


def _units(limit_s: float, scale: float) -> int:
    """Largest integer objective that a partition strictly better than `limit_s` (by more than
    the relative tolerance) can have: its rounded-down bound is below limit * (1 - tol)."""
    return math.ceil(limit_s * (1 - REL_TOL) * scale) - 1


def _neighbours(
    part: Partition, order: list[int] | None = None, limit: int | None = None
) -> list[Partition]:
    """Partitions one boundary move away (layers keep their modes): their critical paths are
    the cuts the next solve would otherwise discover one at a time. `order`: the boundaries
    to move first; `limit`: at most that many partitions."""
    out: list[Partition] = []
    b = part.bounds
    for s in order if order is not None else range(1, len(b) - 1):
        for step in (-1, 1):
            v = b[s] + step
            if b[s - 1] < v < b[s + 1] and (limit is None or len(out) < limit):
                out.append(Partition((*b[:s], v, *b[s + 1 :]), part.modes))
    return out


def rank_shifts(
    part: Partition, stage_rank: tuple[int, ...], *, single: bool = False
) -> list[Partition]:
    """Partitions that move one layer from each rank's chunk j to its chunk j ± 1 at once, on
    all ranks, on the first k or on the last k (schedules with several stages per rank):
    every rank keeps its layer count, the split inside each rank moves together.

    Why: with two or more chunks per rank, one boundary move changes two ranks' totals, so
    the hill climb cannot reach a split in which every rank's first chunk is one layer larger
    than its second, one rank at a time: each such step alone is no better, the critical
    path runs through every rank. 1008B's tp = 8 pp = 16 zbv: the balanced 4 + 4 blocks per
    rank simulate 71.40 s (no single move improves it); 5 + 3 on every rank, 70.75 s."""
    chunks = rank_stages(stage_rank)
    pp = len(chunks)
    vpp = min(len(c) for c in chunks)
    if vpp < 2:
        return []
    b = part.bounds
    counts = [b[s + 1] - b[s] for s in range(len(b) - 1)]
    subsets = [range(pp), *(range(k) for k in range(1, pp)), *(range(k, pp) for k in range(1, pp))]
    if single:  # one rank alone (0 and pp - 1 are above)
        subsets += [range(r, r + 1) for r in range(1, pp - 1)]
    out: list[Partition] = []
    for j in range(vpp):
        for to in (j - 1, j + 1):
            if not 0 <= to < vpp:
                continue
            for ranks in subsets:
                moved = counts[:]
                for r in ranks:
                    src, dst = chunks[r][j], chunks[r][to]
                    if moved[src] < 2:
                        break
                    moved[src] -= 1
                    moved[dst] += 1
                else:
                    out.append(Partition(tuple(itertools.accumulate(moved, initial=0)), part.modes))
    return out


def _descend(
    inputs: PartitionInputs,
    start: Scored,
    modes: tuple[RecomputeMode, ...],
    time_left: Callable[[], float] | None = None,
    polish: bool = False,
    tuning: SearchTuning = TUNING,
) -> list[Scored]:
    """Hill climbing on the stage split (a heuristic, for a better incumbent and hint: the
    optimum often splits layers unevenly inside a rank, which no balanced split finds): move
    one boundary by one layer, re-pick the recompute modes for the cap (hints.repaired), take
    the first strict improvement; where none improves, the rank shifts (rank_shifts: one
    layer between adjacent chunks on many ranks at once); repeat. (The first improvement,
    not the best of a round: it reaches the same plans with fewer scores.) Returns the
    partitions it moved through. `polish`: the rank
    shifts also move one rank alone, and at the split reached, the recompute moves between a
    rank's stages (mode_moves) climb the same way (best improvement per round); ~3x the
    scores, so only for the configuration of a new incumbent (solve_config)."""
    path: list[Scored] = []
    cur = start
    seen = {start.partition.bounds}
    rounds = tuning.descend_rounds
    for _ in range(rounds):
        step: Scored | None = None
        for moves in (_neighbours, lambda p: rank_shifts(p, inputs.stage_rank, single=polish)):
            for near in moves(cur.partition):
                if time_left is not None and time_left() <= 0:
                    return path  # a round of a deep schedule is long: checked per move
                if near.bounds in seen:
                    continue
                seen.add(near.bounds)
                part = repaired(inputs, near.bounds, modes)
                sc = Scored(part, score(inputs, part))
                if sc.score.feasible and sc.score.step_time_s < cur.score.step_time_s:
                    step = sc
                    break  # the first strict improvement (see the docstring)
            if step is not None:
                break
        if step is None:
            break
        cur = step
        path.append(cur)
    for _ in range(rounds if polish else 0):  # then the recompute modes at the split reached
        step = None
        for part in mode_moves(cur.partition, inputs.stage_rank, modes, tuning.mode_lighter):
            if time_left is not None and time_left() <= 0:
                return path
            sc = Scored(part, score(inputs, part))
            if sc.score.feasible and sc.score.step_time_s < (
                step.score.step_time_s if step is not None else cur.score.step_time_s
            ):
                step = sc
        if step is None:
            break
        cur = step
        path.append(cur)
    return path


def mode_moves(
    part: Partition,
    stage_rank: tuple[int, ...],
    modes: tuple[RecomputeMode, ...],
    lighter_at_once: int = TUNING.mode_lighter,
) -> list[Partition]:
    """Partitions with the same split and one rank's recompute moved: one layer of stage A one
    mode lighter and, in a stage B of the same rank (A itself included), the first k layers
    that can be one mode heavier, for every k (as many as it takes to fit the cap again:
    a stage holding fewer micro-batches in flight frees fewer bytes per layer). Layers of a
    stage are interchangeable where they are equal, so A's last layer above the lightest mode
    is the one made lighter.

    Why: hints.repaired recomputes where it saves the most bytes per second, which is the
    stage holding the most micro-batches in flight; where that stage is on the critical path
    and its rank's other stage is not, moving the recompute across is faster at the same
    memory. 1008B's winner: the hill climb's split simulates 70.7043 s with the greedy's
    modes, 70.7029 s with two layers of rank 13's first chunk back to no recompute and three
    of its second chunk selective."""
    order = sorted(modes, key=lambda m: MODE_INDEX[m])
    level = {m: k for k, m in enumerate(order)}
    b, cur = part.bounds, part.modes
    out: list[Partition] = []
    for on_rank in rank_stages(stage_rank):
        for a in on_rank:
            heavy = [i for i in reversed(range(b[a], b[a + 1])) if level[cur[i]] > 0]
            heavy = heavy[:lighter_at_once]
            down = list(cur)
            for lighter in heavy:
                down[lighter] = order[level[cur[lighter]] - 1]
                out.append(Partition(b, tuple(down)))
                for t in on_rank:
                    moved = list(down)
                    for i in range(b[t], b[t + 1]):
                        if i not in heavy and level[moved[i]] < len(order) - 1:
                            moved[i] = order[level[moved[i]] + 1]
                            out.append(Partition(b, tuple(moved)))
    return out
