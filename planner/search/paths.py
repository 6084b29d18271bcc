"""Critical paths of a simulated schedule, as linear functions of the stage durations.

The simulator's makespan is a longest path through the schedule's dependency graph (the
per-rank order plus the data dependencies of `planner.schedules.validate`), so it equals

    makespan(d) = max over paths P of  sum_s (F_P[s] fw_s + B_P[s] bw_s + I_P[s] (bw_s - w_s)
                                              + W_P[s] w_s) + sum_i X_P[i] p2p_i

where the counts F_P, B_P, I_P, W_P, X_P say how often P passes each stage's actions and each
boundary. Every single path is a valid lower bound of the makespan for *every* duration vector;
the search adds the critical path of each partition it evaluates as a cut to its CP-SAT model.
The cost model adds the runtime's fixed per-action overhead to every stage's durations
(planner.cost.partition), so a path's length is its length over the layers' sums plus a
constant: `length_s(inputs.overhead_durations)`.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from planner.memo import PerObject
from planner.schedules import Schedule, StageDurations, kernel
from planner.schedules.generators import schedule_codes
from planner.schedules.simulate import compiled_flat, longest_path, rank_positions

_F, _B, _I, _W = 0, 1, 2, 3


@dataclass(frozen=True)
class PathCut:
    """How often a path visits each stage's F, B, I, W actions and each boundary's p2p."""

    f: tuple[int, ...]
    b: tuple[int, ...]
    i: tuple[int, ...]
    w: tuple[int, ...]
    x: tuple[int, ...]  # per boundary (num_stages - 1)

    def length_s(self, d: StageDurations) -> float:
        # (durations may list more boundaries than the path has: only the path's are read)
        total = 0.0
        stages = zip(self.f, self.b, self.i, self.w, d.fw_s, d.bw_s, d.w_s, strict=False)
        for f, b, i, w, fw, bw, ws in stages:
            total += f * fw + b * bw
            total += i * (bw - ws) + w * ws
        for c, p2p in zip(self.x, d.p2p_s, strict=False):
            total += c * p2p
        return total


def critical_path(schedule: Schedule, d: StageDurations) -> tuple[float, PathCut]:
    """The makespan and one longest path of `schedule` under durations `d`
    (planner.schedules.simulate.longest_path: the rank's previous action is the predecessor
    unless a dependency ends strictly later)."""
    n_st = schedule.num_stages
    makespan, counts, x = longest_path(schedule, d)
    f, b, i, w = (tuple(counts[k * n_st : (k + 1) * n_st]) for k in range(4))
    return makespan, PathCut(f=f, b=b, i=i, w=w, x=tuple(x))


def seed_cuts(schedule: Schedule) -> list[PathCut]:
    """The paths every configuration starts from: each rank's busy chain (rank_chain), then
    the fill/drain paths through each rank (through_rank_paths). Cached per schedule
    (configurations that differ in tp, dp, mbs or ZeRO share it). Walked in C where the
    kernel is built (_seed_cuts_c), else by those two functions."""

    def build() -> tuple[PathCut, ...]:
        if kernel.available():
            return _seed_cuts_c(schedule)
        chains = [rank_chain(schedule, r) for r in range(schedule.pp)]
        return (*chains, *through_rank_paths(schedule, chains=chains))

    return list(_SEEDS.get(schedule, build))


def _seed_cuts_c(schedule: Schedule) -> tuple[PathCut, ...]:
    """seed_cuts' paths from the C kernel's walks over the compiled table
    (planner.schedules.kernel.seed_paths: the same walks as rank_chain and
    through_rank_paths, the same cuts in the same order; test_bounds_and_paths.py compares
    them on every schedule kind)."""
    n_st, pp = schedule.num_stages, schedule.pp
    flat, count = kernel.seed_paths(compiled_flat(schedule), pp, n_st)
    values = flat.tolist()
    slots, rec = 4 * n_st, 5 * n_st - 1

    def cut(at: int, x: tuple[int, ...]) -> PathCut:
        f, b, i, w = (tuple(values[at + k * n_st : at + (k + 1) * n_st]) for k in range(4))
        return PathCut(f=f, b=b, i=i, w=w, x=x)

    no_x = (0,) * (n_st - 1)
    chains = [cut(at, no_x) for at in range(0, pp * slots, slots)]
    ends = range(pp * slots, pp * slots + count * rec, rec)
    return (*chains, *(cut(at, tuple(values[at + slots : at + rec])) for at in ends))


_SEEDS: PerObject[tuple[PathCut, ...]] = PerObject()


def rank_chain(schedule: Schedule, rank: int) -> PathCut:
    """The path through all of one rank's actions in order (its busy time)."""
    n_st = schedule.num_stages
    counts = [[0] * n_st for _ in range(4)]
    codes, offsets = schedule_codes(schedule)  # no Action built for a generated schedule
    lo, hi = 3 * offsets[rank], 3 * offsets[rank + 1]
    pairs = zip(codes[lo + 1 : hi : 3], codes[lo:hi:3], strict=True)
    for (kind, stage), n in Counter(pairs).items():
        counts[kind][stage] = n
    f, b, i, w = (tuple(v) for v in counts)
    return PathCut(f=f, b=b, i=i, w=w, x=(0,) * max(0, n_st - 1))


def through_rank_paths(
    schedule: Schedule, *, chains: Sequence[PathCut] | None = None
) -> list[PathCut]:
    """Per rank: the data-dependency chain that leads to its first action, all its actions in
    order, then the chain of backward actions that waits on its last F/B/I (the pipeline's fill
    and drain around that rank: with uniform stages, 1F1B's exact makespan). Trailing W actions
    are left out of the second variant so that the drain chain can follow.

    The rank's own actions are counted by rank_chain (from a generated schedule's codes) and
    the chains walk the simulator's flat compiled table (six ints per row: rank, kind *
    stages + stage, dep, lag slot, dep, lag slot; lag slot 0 for "none", boundary b as
    b + 1; tests/planner/search/test_bounds_and_paths.py checks its dependencies against
    the validator's rule): one pass over its columns indexes each action's first backward
    dependent across a boundary (linear in the schedule's actions;
    no tuple per row is built: a 64-rank zbv schedule of 512 micro-batches has 196,608).
    `chains`: rank_chain of every rank, where the caller has them already."""
    n_st = schedule.num_stages
    flat = compiled_flat(schedule)  # seed_cuts keeps the result: built once per schedule
    slots = flat[1::6]
    # per action, its first B/I dependent across a boundary (row order, then d1 before d2)
    drain: dict[int, tuple[int, int]] = {}
    backward = range(_B * n_st, (_I + 1) * n_st)  # the slots of B and I actions
    columns = zip(slots, flat[2::6], flat[3::6], flat[4::6], flat[5::6], strict=True)
    for idx, (slot, d1, l1, d2, l2) in enumerate(columns):
        if slot in backward:
            if d1 >= 0 and l1 > 0 and d1 not in drain:
                drain[d1] = (idx, l1 - 1)
            if d2 >= 0 and l2 > 0 and d2 not in drain:
                drain[d2] = (idx, l2 - 1)
    cuts: list[PathCut] = []
    for rank, mine in enumerate(rank_positions(schedule)):
        if not mine:
            continue
        counts = [[0] * n_st for _ in range(4)]
        x = [0] * max(0, n_st - 1)
        cur = mine[0]
        while True:  # fill: follow a cross-rank data dependency back to the start
            at = 6 * cur
            d1, l1, d2, l2 = flat[at + 2], flat[at + 3], flat[at + 4], flat[at + 5]
            if d1 >= 0 and l1 > 0:
                cur, boundary = d1, l1 - 1
            elif d2 >= 0 and l2 > 0:
                cur, boundary = d2, l2 - 1
            else:
                break
            kind, stage = divmod(slots[cur], n_st)
            counts[kind][stage] += 1
            x[boundary] += 1
        own = chains[rank] if chains is not None else rank_chain(schedule, rank)
        body = [list(own.f), list(own.b), list(own.i), list(own.w)]
        trailing = [0] * n_st  # the W actions after the rank's last F/B/I
        last = len(mine) - 1
        while last > 0 and slots[mine[last]] // n_st == _W:
            trailing[slots[mine[last]] % n_st] += 1
            last -= 1
        if slots[mine[last]] // n_st == _W:  # nothing but W: the variant keeps them all
            trailing, last = [0] * n_st, len(mine) - 1
        for end, cut_w in ((mine[-1], [0] * n_st), (mine[last], trailing)):
            vc = [
                [a + b for a, b in zip(row, own_row, strict=True)]
                for row, own_row in zip(counts, body, strict=True)
            ]
            vc[_W] = [v - t for v, t in zip(vc[_W], cut_w, strict=True)]
            vx = x[:]
            cur = end
            while cur in drain:  # drain: follow the backward chain that waits on it
                cur, b = drain[cur]
                kind, stage = divmod(slots[cur], n_st)
                vc[kind][stage] += 1
                vx[b] += 1
            cuts.append(
                PathCut(
                    f=tuple(vc[_F]), b=tuple(vc[_B]), i=tuple(vc[_I]), w=tuple(vc[_W]), x=tuple(vx)
                )
            )
    return cuts


@dataclass(frozen=True)
class Detour:
    """A detour of one rank's chain (detour_paths): from the rank's action on stage s, the
    same micro-batch's actions of the same kind through the stages between s and the
    rank's next stage t = s + pp (forward, F) or s - pp (backward, B), each on another
    rank, into the rank's action on t; the rank's own actions between the two are
    skipped. `delta`: per stage, the detour's actions less the skipped ones (all of the
    detour's kind); `crossings`: the boundaries it crosses between two ranks (each a p2p
    lag; the simulator charges none between stages of one rank)."""

    backward: bool
    delta: tuple[int, ...]
    crossings: int


@dataclass(frozen=True)
class DetourPath:
    """Rank `rank`'s through path (`base`: the fill to its first action, every action of
    the rank in order, the drain after its last) with `detours`: pairwise disjoint stretches
    of the chain, each of which the path may take or not — every subset is a path of the
    schedule."""

    rank: int
    base: PathCut
    detours: tuple[Detour, ...]


def detour_paths(schedule: Schedule) -> tuple[DetourPath, ...]:
    """Per rank, its DetourPath: the detours found on its chain (pure ones only: every
    skipped action of the detour's kind), chosen by earliest end so that none overlaps the
    next (interval scheduling: the most of them). Empty where no rank has a stage pp
    further on (vpp = 1). Cached per schedule.

    Each detour is a path of the schedule's DAG: F of stage s + 1 waits for F of s (the
    same micro-batch), B of s - 1 for B of s (planner.schedules.validate), so the rank's
    action on s, the detour's actions and the rank's action on t are linked by data
    dependencies, and the rank's chain continues from its action on t. Taking the detours
    of any subset replaces disjoint stretches of the chain, so each subset is a path from
    the base path's start to its end."""
    return _DETOURS.get(schedule, lambda: _detour_paths(schedule))


_DETOURS: PerObject[tuple[DetourPath, ...]] = PerObject()


def _detour_paths(schedule: Schedule) -> tuple[DetourPath, ...]:
    n_st, pp = schedule.num_stages, schedule.pp
    if n_st <= pp:
        return ()
    seeds = seed_cuts(schedule)
    if len(seeds) != 3 * pp:  # a rank without actions: no through path to start from
        return ()
    codes, offsets = schedule_codes(schedule)  # triples (stage, kind, micro-batch)
    routes = _Routes(schedule, codes)
    out = []
    for rank in range(pp):
        lo, hi = 3 * offsets[rank], 3 * offsets[rank + 1]
        found = sorted(_rank_detours(codes[lo:hi], rank, routes))
        chosen: list[Detour] = []
        end = -1
        stages = codes[lo:hi:3]
        for j, i, kind, first, last in found:
            if i >= end:  # starts where the last one ended, or later
                chosen.append(routes.detour(kind, first, last, stages[i + 1 : j]))
                end = j
        if chosen:
            # the first of the rank's two through paths: every action, then the drain
            out.append(DetourPath(rank, seeds[pp + 2 * rank], tuple(chosen)))
    return tuple(out)


class _Routes:
    """Per (kind, stage s) of a rank's action: the stages a detour passes from s to the
    rank's next stage pp away (s + pp forward, s - pp backward), or None where there is
    none (off the ends, another rank's stage there, the rank itself between, or a stage
    between that lacks that kind of action: a split backward has I, not B)."""

    def __init__(self, schedule: Schedule, codes: Sequence[int]) -> None:
        self.schedule = schedule
        self.codes = codes
        # actions per (kind, stage): every micro-batch has one where it is m
        self.count = Counter(zip(codes[1::3], codes[0::3], strict=True))
        self._known: dict[tuple[int, int], tuple[int, range, int, bool] | None] = {}
        self._mbs: dict[tuple[int, int], set[int]] = {}

    def route(self, kind: int, stage: int) -> tuple[int, range, int, bool] | None:
        """(target stage, stages between, boundaries crossed between ranks, whether every
        micro-batch has its action on every stage between) or None."""
        key = (kind, stage)
        if key not in self._known:
            self._known[key] = self._route(kind, stage)
        return self._known[key]

    def _route(self, kind: int, stage: int) -> tuple[int, range, int, bool] | None:
        sched, pp = self.schedule, self.schedule.pp
        step = 1 if kind == _F else -1
        t = stage + step * pp
        rank = sched.rank_of(stage)
        if not 0 <= t < sched.num_stages or sched.rank_of(t) != rank:
            return None
        between = range(stage + step, t, step)
        if any(sched.rank_of(x) == rank or not self.count[(kind, x)] for x in between):
            return None
        ranks = [sched.rank_of(x) for x in (stage, *between, t)]
        crossings = sum(x != y for x, y in itertools.pairwise(ranks))
        full = all(self.count[(kind, x)] == sched.num_microbatches for x in between)
        return t, between, crossings, full

    def passes(self, kind: int, stage: int, mb: int) -> bool:
        """Micro-batch `mb` has its action of this kind on every stage the route from
        `stage` passes."""
        route = self.route(kind, stage)
        if route is None:
            return False
        if route[3]:
            return True
        return all(mb in self._micro_batches(kind, x) for x in route[1])

    def _micro_batches(self, kind: int, stage: int) -> set[int]:
        key = (kind, stage)
        if key not in self._mbs:
            c = self.codes
            triples = zip(c[0::3], c[1::3], c[2::3], strict=True)
            self._mbs[key] = {mb for st, k, mb in triples if k == kind and st == stage}
        return self._mbs[key]

    def detour(self, kind: int, first: int, last: int, skipped: Sequence[int]) -> Detour:
        """The Detour from stage `first` to `last`, skipping the rank's actions on the
        stages `skipped`."""
        route = self.route(kind, first)
        assert route is not None and route[0] == last
        delta = [0] * self.schedule.num_stages
        for x in route[1]:
            delta[x] += 1
        for x in skipped:
            delta[x] -= 1
        return Detour(kind == _B, tuple(delta), route[2])


_RUNS = re.compile(rb"\x00{2,}|\x01{2,}")  # kinds _F = 0, _B = 1


def _rank_detours(
    codes: Sequence[int], rank: int, routes: _Routes
) -> list[tuple[int, int, int, int, int]]:
    """(end position, start position, kind, first stage, last stage) of every pure detour on
    one rank's order (`codes`: its (stage, kind, micro-batch) triples). The actions skipped
    and both ends are all of one kind, so a pure detour lies inside a maximal run of F (or
    B) actions of the order: the warm-up and cool-down, where runs are long; each run is
    searched alone."""
    stages, mbs = codes[0::3], codes[2::3]
    found = []
    # the runs of two or more F or B actions, found by the regex engine over the kinds
    for run in _RUNS.finditer(bytes(list(codes[1::3]))):
        a, b = run.span()
        kind = run.group()[0]
        pos = {(stages[i], mbs[i]): i for i in range(a, b)}
        for i in range(a, b):
            route = routes.route(kind, stages[i])
            if route is None:
                continue
            t = route[0]
            j = pos.get((t, mbs[i]))
            if j is not None and j > i and routes.passes(kind, stages[i], mbs[i]):
                found.append((j, i, kind, stages[i], t))
    return found
