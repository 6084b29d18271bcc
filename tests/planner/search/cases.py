"""PartitionInputs cases shared by the search's unit tests: random GPT-shaped and three-mode
pipelines for every schedule, random partitions, the path cuts a search collects, the LP
floor, and the per-rank / per-stage block counts the count domains bound."""

from __future__ import annotations

import operator
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from planner.cost import PartitionInputs, PartitionScore
from planner.errors import SpecError
from planner.schedules import generate, peak_inflight, rank_held_points
from planner.schedules.ir import stage_to_rank
from planner.search.cutlp import CutLP
from planner.search.domains import Domains, counted_run
from planner.search.exact import Collector, ConfigResult, Scored
from planner.search.exhaustive import exhaustive_config, scored_partitions
from planner.search.model import layer_runs
from planner.search.partition import Partition, durations_of, schedule_of, score
from planner.search.paths import PathCut, critical_path, seed_cuts
from planner.search.space import Config
from planner.specs.base import RecomputeMode, ScheduleName

SCHEDULES: list[tuple[ScheduleName, int]] = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("zb-h1", 1),
    ("interleaved-1f1b", 2),
    ("zbv", 2),
]
# every schedule, interleaving at two depths (the schedule and floor tests' table)
ALL_SCHEDULES: list[tuple[ScheduleName, int]] = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("interleaved-1f1b", 2),
    ("interleaved-1f1b", 3),
    ("zb-h1", 1),
    ("zbv", 2),
]
MODES: tuple[RecomputeMode, ...] = ("none", "full")


def pipeline_inputs(
    schedule: ScheduleName,
    pp: int,
    vpp: int,
    m: int,
    *,
    fw: tuple[float, ...],
    bw_input: tuple[tuple[float, float, float], ...],
    bw_weight: tuple[float, ...],
    p2p: tuple[float, ...],
    act: tuple[tuple[float, float, float], ...],
    static: tuple[float, ...],
    post: tuple[float, ...],
    cap: float,
    modes: tuple[RecomputeMode, ...],
    fixed: float = 1.0,
) -> PartitionInputs:
    """PartitionInputs of the given per-layer numbers on a real schedule: its in-flight
    counts, held points and stage ranks come from planner.schedules (the tests' one
    constructor)."""
    sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=m)
    return PartitionInputs(
        schedule=schedule,
        pp=pp,
        vpp=vpp,
        num_microbatches=m,
        layer_names=tuple(f"l{i}" for i in range(len(fw))),
        fw_s=fw,
        bw_input_s=bw_input,
        bw_weight_s=bw_weight,
        p2p_s=p2p,
        activation_bytes=act,
        static_bytes=static,
        post_s=post,
        inflight=peak_inflight(sched),
        stage_rank=tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp)),
        fixed_bytes=fixed,
        cap_bytes=cap,
        allowed_modes=modes,
        held_points=rank_held_points(sched),
    )


def gpt_inputs(rng: random.Random, schedule: ScheduleName, vpp: int) -> PartitionInputs:
    pp = rng.choice([1, 2, 3]) if schedule not in ("interleaved-1f1b", "zbv") else 2
    n = rng.randint(max(3, pp * vpp), 7)
    m = rng.choice([pp, 2 * pp, 4])
    if schedule == "interleaved-1f1b" and m % max(1, m // pp):
        m = pp

    def layer() -> tuple[float, tuple[float, float, float], float, float, float]:
        bw = rng.uniform(0.1, 2.0)
        return (
            rng.uniform(0.1, 2.0),
            (bw, bw, bw * 1.3),
            rng.uniform(0, 1),
            rng.uniform(0, 0.5),
            rng.uniform(0, 3.0),
        )

    ends = [layer(), layer()]
    block = layer()
    rows = [ends[0], *([block] * (n - 2)), ends[1]]
    act = tuple((a, a, a * 0.3) for a in (rng.uniform(1, 4) for _ in range(n)))
    act = (act[0], *([act[1]] * (n - 2)), act[-1])
    static = (rng.uniform(1, 5), *([rng.uniform(1, 5)] * (n - 2)), rng.uniform(1, 5))
    return pipeline_inputs(
        schedule,
        pp,
        vpp,
        m,
        fw=tuple(r[0] for r in rows),
        bw_input=tuple(r[1] for r in rows),
        bw_weight=tuple(r[2] for r in rows),
        p2p=tuple(r[3] for r in rows),
        act=act,
        static=static,
        post=tuple(r[4] for r in rows),
        cap=rng.choice([1e9, 30.0, 60.0]),
        modes=MODES,
    )


def uniform_gpt_inputs(
    rng: random.Random, schedule: ScheduleName, pp: int, vpp: int, blocks: int
) -> PartitionInputs:
    """A GPT-shaped pipeline of `blocks` equal blocks between a light embedding and head, the
    three recompute modes, a random cap (the hint tests' shared case)."""
    n = blocks + 2
    fw = (0.1, *([1.0] * blocks), 0.3)
    return pipeline_inputs(
        schedule,
        pp,
        vpp,
        2 * pp,
        fw=fw,
        bw_input=tuple((2 * f, 2.2 * f, 3 * f) for f in fw),
        bw_weight=fw,
        p2p=(0.01,) * n,
        act=tuple((a, a * 0.4, a * 0.05) for a in (0.5, *([2.0] * blocks), 0.5)),
        static=(1.0,) * n,
        post=(0.1,) * n,
        cap=rng.uniform(20, 200),
        modes=("none", "selective", "full"),
    )


def random_partition(rng: random.Random, inputs: PartitionInputs) -> Partition:
    """Random stage boundaries and a random recompute mode per layer."""
    n, n_st = inputs.num_layers, inputs.num_stages
    bounds = (0, *sorted(rng.sample(range(1, n), n_st - 1)), n)
    return Partition(bounds, tuple(rng.choice(MODES) for _ in range(n)))


def path_cuts(
    inputs: PartitionInputs,
    rng: random.Random | None = None,
    random_partitions: int = 0,
    scores: tuple[PartitionScore, ...] = (),
) -> list[PathCut]:
    """What the search collects: the seed cuts, then the critical paths of `random_partitions`
    random partitions and of the partitions scored in `scores` (every path is a valid cut for
    every partition)."""
    sched = schedule_of(inputs)
    cuts = seed_cuts(sched)
    assert rng is not None or not random_partitions
    picked = [score(inputs, random_partition(rng, inputs)) for _ in range(random_partitions)]  # type: ignore[arg-type]
    cuts += [critical_path(sched, durations_of(sc))[1] for sc in (*picked, *scores)]
    return cuts


THREE: tuple[RecomputeMode, ...] = ("none", "selective", "full")


def mixed_case(base: int, seed: int) -> tuple[random.Random, PartitionInputs]:
    """Case `seed` of a set numbered from `base`: GPT-shaped inputs (odd seeds) or three-mode
    ones (even), the schedules in turn; the generator goes on to the test's own draws."""
    return _case(gpt_inputs if seed % 2 else three_mode_inputs, base, seed)


def gpt_case(base: int, seed: int) -> tuple[random.Random, PartitionInputs]:
    """Case `seed` of a set numbered from `base`: gpt_inputs, the schedules in turn; the
    generator goes on to the test's own draws."""
    return _case(gpt_inputs, base, seed)


def three_mode_case(base: int, seed: int) -> tuple[random.Random, PartitionInputs]:
    """Case `seed` of a set numbered from `base`: three_mode_inputs, the schedules in turn;
    the generator goes on to the test's own draws."""
    return _case(three_mode_inputs, base, seed)


def _case(
    make: Callable[[random.Random, ScheduleName, int], PartitionInputs], base: int, seed: int
) -> tuple[random.Random, PartitionInputs]:
    rng = random.Random(base + seed)
    schedule, vpp = SCHEDULES[seed % len(SCHEDULES)]
    return rng, make(rng, schedule, vpp)


def three_mode_inputs(rng: random.Random, schedule: ScheduleName, vpp: int) -> PartitionInputs:
    """gpt_inputs with a selective mode that differs from both none and full, and caps tight
    enough that recompute is forced in many cases."""
    base = gpt_inputs(rng, schedule, vpp)
    sel_bw = rng.uniform(1.0, 1.15)
    sel_act = rng.uniform(0.4, 0.8)
    bw = tuple((b[0], b[0] * sel_bw, b[2]) for b in base.bw_input_s)
    act = tuple((a[0], a[0] * sel_act, a[2]) for a in base.activation_bytes)
    total = sum(base.static_bytes) + sum(a[0] for a in act) * max(base.inflight)
    cap = base.fixed_bytes + total * rng.choice([0.35, 0.5, 0.7, 2.0]) / base.pp
    return PartitionInputs(
        **{
            **base.__dict__,
            "bw_input_s": bw,
            "activation_bytes": act,
            "cap_bytes": cap,
            "allowed_modes": THREE,
        }
    )


def run_counts(inputs: PartitionInputs, part: Partition) -> list[int]:
    """Per rank, then per stage: the counted run's layers (what the domains bound)."""
    run = layer_runs(inputs)[counted_run(inputs)]
    inside = range(run.first, run.first + run.count)
    stage = [sum(1 for i in part.stage_layers(s) if i in inside) for s in range(part.num_stages)]
    rank = [0] * inputs.pp
    for s, c in enumerate(stage):
        rank[inputs.stage_rank[s]] += c
    return rank + stage


# (step time, run_counts) per partition
Counted = list[tuple[float, list[int]]]


def feasible_counts(inputs: PartitionInputs) -> Counted:
    """(step time, run_counts) of every partition over THREE that fits the cap (exhaustive)."""
    return [
        (sc.score.step_time_s, run_counts(inputs, sc.partition))
        for sc in scored_partitions(inputs, modes=THREE)
        if sc.score.feasible
    ]


def inside(counts: list[int], domains: Domains) -> bool:
    """Every count within its (lo, hi) domain."""
    return all(lo <= c <= hi for c, (lo, hi) in zip(counts, domains, strict=True))


def lp_floor(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...], cuts: list[PathCut]
) -> float | None:
    """The LP's optimum with `cuts`: a floor of every partition's step time (None: no optimum)."""
    point = CutLP(inputs, modes, cuts=cuts).solve()
    return point.value_s if point is not None else None


def collector(inputs: PartitionInputs, seeds: list[PathCut]) -> Collector:
    """What solve_config's phases share, on a fresh result (no CP-SAT model yet)."""
    return Collector(inputs, seeds, ConfigResult("UNKNOWN", None))


def consider_into(inputs: PartitionInputs, seeds: list[PathCut]) -> Callable[[Partition], Scored]:
    """The `consider` solve_config hands the LP phases (exact.Collector's): score a partition
    and append its critical path to `seeds`, the LP's cuts."""
    return collector(inputs, seeds).consider


@dataclass(frozen=True)
class SolvedCase:
    """A mixed_case with its exhaustive optimum and the path cuts a search would have."""

    inputs: PartitionInputs
    best: Scored
    cuts: list[PathCut]


def solved_case(
    base: int, seed: int, *, random_partitions: int = 3, pipelined: bool = True
) -> SolvedCase | None:
    """mixed_case(base, seed) with its optimum over THREE and path_cuts of
    `random_partitions` random partitions; None where nothing fits or, if `pipelined`, where
    pp < 2 (no counts to bound)."""
    rng, inputs = mixed_case(base, seed)
    if pipelined and inputs.pp < 2:
        return None
    best = exhaustive_config(inputs, modes=THREE).best
    if best is None:
        return None
    return SolvedCase(inputs, best, path_cuts(inputs, rng, random_partitions=random_partitions))


# what the sweep groups configurations by (space.enumerate_groups): all but schedule and vpp
_SWEEP_KEY = operator.attrgetter(
    "tp",
    "pp",
    "dp",
    "micro_batch_size",
    "zero_stage",
    "cp",
    "cp_comm",
    "ep",
    "etp",
    "sequence_parallel",
    "modes",
)


def sweep_grouped(configs: Iterable[Config]) -> list[list[Config]]:
    """The reference grouping space.enumerate_groups must equal: configurations with the
    same _SWEEP_KEY, groups in first-seen order, members in their order."""
    groups: dict[tuple[object, ...], list[Config]] = {}
    for cfg in configs:
        groups.setdefault(_SWEEP_KEY(cfg), []).append(cfg)
    return list(groups.values())


def as_member(base: PartitionInputs, schedule: ScheduleName, vpp: int) -> PartitionInputs | None:
    """`base` as the member of its group under `schedule` and `vpp` (the same layers, pp and m,
    that schedule's in-flight counts, stage-to-rank map and held points); None where the
    schedule cannot run it (no such schedule at this m, or more stages than layers)."""
    pp, m = base.pp, base.num_microbatches
    try:
        sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=m)
    except SpecError:
        return None
    if pp * vpp > base.num_layers:
        return None
    return replace(
        base,
        schedule=schedule,
        vpp=vpp,
        inflight=peak_inflight(sched),
        stage_rank=tuple(stage_to_rank(s, pp=pp, schedule=schedule) for s in range(pp * vpp)),
        held_points=rank_held_points(sched),
    )
