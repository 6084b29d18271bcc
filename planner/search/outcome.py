"""The state of a search (planner.search.driver.run_search) and what its incumbent settles.

`Entry` is one configuration the sweep built inputs for, `MemoryGroup` a group settled by a
floor, `Outcome` the whole search's state and result (the floors kept per kind included: the
functions its comments name are planner.search.sweep_floors', which reads and fills them).
`time_bound_s` and `bubble_closed` say what the incumbent settles: the step time a
configuration must beat, and under objective bubble every pp > 1 configuration once the
incumbent has zero bubble.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.cost import PartitionInputs
from planner.cost.source import CostSource
from planner.search.bubble_floor import EdgeTerms
from planner.search.domains import Domains
from planner.search.exact import ConfigResult, Scored
from planner.search.kinds import CoarseKey, ExpertKey, FloorFields, MemoryKey, PostKey
from planner.search.paths import PathCut
from planner.search.space import Config, Family
from planner.search.tuning import TUNING, SearchTuning
from planner.specs.request import PlanRequest


@dataclass
class Entry:
    """One configuration the sweep built PartitionInputs for: its floors, what the improve pass
    and the solves learned, and its verdict."""

    config: Config
    inputs: PartitionInputs
    memory_floor_bytes: float
    time_floor_s: float
    result: ConfigResult | None = None
    estimate_s: float = float("inf")  # step time of a quick heuristic partition
    verdict: str = "pending"  # pending | dominated | solved | memory | pruned | timeout
    seeds: tuple[Scored, ...] = ()  # hints scored (and hill-climbed) by the improve pass
    known_paths: tuple[PathCut, ...] = ()  # path cuts of an earlier, unfinished solve
    known_domains: Domains | None = None  # ... and the count domains it proved
    probed: bool = False  # ... after probing them to the end
    # the count domains an interim solve proved (every partition better than
    # `interim_bound_s` lies in them), whether its probing reached its fixed point there
    interim_domains: Domains | None = None
    interim_bound_s: float = 0.0
    interim_probed: bool = False
    descended: bool = False  # the improve pass ran its hill climb to the end
    proof_floor_s: float = 0.0  # what an unfinished solve proved: cut_floor_s, its LP floors
    bubble_floor: float | None = None  # objective bubble: entry_bubble_floor, once computed
    edge_floor: float | None = None  # objective bubble: entry_edge_floor, once computed

    @property
    def floor_s(self) -> float:
        """The best proven lower bound of this configuration's step time."""
        return max(self.time_floor_s, self.proof_floor_s)


@dataclass
class MemoryGroup:
    """A group pruned by its memory floor (valid for every schedule and vpp in it); explain
    builds a representative Entry (`memory_rep`) only for the few it reports."""

    members: list[Config]
    memory_floor_bytes: float
    time_floor_s: float
    cheap: bool = False  # time_floor_s is only the layers' work (group_time_floor refines it)

    @property
    def config(self) -> Config:
        return self.members[0]


@dataclass
class Outcome:
    """The state of one search (run_search) and what it returns: the entries, the incumbent,
    the counts of what was pruned, the unswept groups and the floors kept per kind."""

    entries: list[Entry]
    best: tuple[Entry, Scored] | None
    status: str  # OPTIMAL | FEASIBLE
    solver_calls: int = 0
    cuts: int = 0
    elapsed_s: float = 0.0
    invalid: int = 0
    group_pruned: int = 0  # configurations pruned with their group's memory floor
    group_memory_floor: float = float("inf")
    skipped: int = 0  # configurations left unvisited at the time limit
    num_configs: int = 0
    memory_groups: list[MemoryGroup] = field(default_factory=list)  # groups pruned by memory
    best_found_at_s: float = 0.0  # elapsed time when the final best plan was first seen
    now: Callable[[], float] = lambda: 0.0
    group_time_pruned: int = 0  # configurations pruned with their group's time floor
    group_bubble_pruned: int = 0  # objective bubble: pruned with their group's bubble floor
    source: CostSource | None = None
    families: dict[Family, tuple[Entry, Scored]] = field(default_factory=dict)
    time_groups: list[MemoryGroup] = field(default_factory=list)  # groups pruned by time
    pending: list[list[Config]] = field(default_factory=list)  # groups not swept yet
    pending_floors: dict[int, float | None] = field(default_factory=dict)  # id(group) -> floor
    work_kinds: dict[tuple[object, ...], tuple[float, float]] = field(
        default_factory=dict
    )  # (tp, mbs, sp, split backward, cp, cp_comm, ep, etp) -> (work_s, chain_s): work_floor
    coarse_kinds: dict[CoarseKey, tuple[float, float] | None] = field(
        default_factory=dict
    )  # (tp, mbs, sp, cp) -> floors of its kinds' (work_s, chain_s): coarse_floor
    expert_kinds: dict[ExpertKey, tuple[float, float] | None] = field(
        default_factory=dict
    )  # (tp, mbs, sp, cp, ep, etp) -> floors of its kinds' (work_s, chain_s): expert_floor
    provisional: tuple[Entry, Scored] | None = None  # bubble: best of the unproven partitions
    edge_kinds: dict[tuple[object, ...], EdgeTerms | None] = field(
        default_factory=dict
    )  # (kind_key, modes) -> its EdgeTerms without p2p: group_edge_floor
    edge_sums: dict[tuple[object, ...], float] = field(
        default_factory=dict
    )  # ((kind_key, modes), pp, drain) -> the sum of its rank edges: group_edge_floor
    pending_bubble: dict[int, float] = field(default_factory=dict)  # id(group) -> edge floor
    memory_kinds: dict[MemoryKey, float | None] = field(
        default_factory=dict
    )  # memory_key -> kind_memory_floor_bytes (None: no costs): _settle_pending
    post_kinds: dict[PostKey, float | None] = field(
        default_factory=dict
    )  # post_key -> kind_post_floor_s (None: no costs): post_floor
    shared_floors: dict[tuple[object, ...], float] = field(
        default_factory=dict
    )  # floor_fields of a group -> its coarse and expert floors, once both known: shared_floor
    partial_floors: dict[tuple[object, ...], tuple[float, int]] = field(
        default_factory=dict
    )  # ... -> what is known of them, and the floors kept when it was: shared_floor
    lower_bound_s: float | None = None
    gap: float | None = None
    bubble_bound: float | None = None  # objective bubble: no plan has a smaller bubble
    stopped_at_gap: bool = False  # stopped by search.gap_tolerance
    interim_solves: int = 0  # configurations solved against the interim bound (_visit)
    alternatives_note: str | None = None
    tuning: SearchTuning = TUNING  # what run_search was given; the phases read it here
    cpu_clock: bool = False  # what run_search was given: CP-SAT's solves stop on CPU time
    gap_check_after: float = -math.inf  # search clock before which no throttled gap check runs
    # the last complete scan of the unswept groups: ((id, len of out.pending, incumbent
    # bound), their least floor): _pending_floor
    pending_scan: tuple[tuple[int, int, float | None], float] | None = None
    # id(group) -> (its floor_fields, its group_memory_key), for every enumerated group
    # (sweep_floors.sweep_order): group_keys
    group_keys: dict[int, tuple[FloorFields, MemoryKey]] = field(default_factory=dict)


def time_bound_s(request: PlanRequest, out: Outcome) -> float | None:
    """The step time a configuration must beat to matter, None if every one matters: the
    incumbent's (objective time), or objective bubble with an incumbent of zero bubble (no
    plan has less, so only a faster one with zero bubble could beat it: a 0 % bubble proves
    itself, and time breaks the tie)."""
    best = out.best
    if best is None or request.search.mode == "exhaustive":
        return None
    if request.objective == "bubble" and best[1].score.bubble_fraction > 0.0:
        return None
    return best[1].score.step_time_s


def bubble_closed(request: PlanRequest, out: Outcome, pp: int) -> bool:
    """Objective bubble with a zero-bubble incumbent: a pp > 1 configuration cannot tie it.
    Every stage holds a layer of positive time, so rank 1 idles at least until stage 0's
    first forward ends, and its idle time makes the bubble (sum of idle / (pp x step),
    planner.schedules.simulate) positive under every schedule."""
    best = out.best
    return (
        pp > 1
        and request.objective == "bubble"
        and request.search.mode != "exhaustive"
        and best is not None
        and best[1].score.bubble_fraction == 0.0
    )
