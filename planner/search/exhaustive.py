"""The exhaustive oracle: every stage split x every per-layer recompute assignment.

For one configuration it enumerates all C(L-1, S-1) ways to cut L layers into S non-empty
contiguous stages and, for each, all |modes|^L recompute assignments, keeps those that fit the
memory cap (floating point, the cost model's own check) and scores them with the simulator
(planner.cost.score_partition). Two shortcuts leave the result unchanged: per stage, assignments
that give the same (backward time, activation bytes) are scored once (the cost model only sees
those sums), and the simulator's answer is cached per stage-duration vector.
It shares nothing with the CP-SAT path except the scorer, which is what makes it an oracle.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from planner.cost import MODE_INDEX, PartitionInputs
from planner.errors import SpecError
from planner.search.exact import ConfigResult, Scored, preferred, ties_with
from planner.search.model import StageSplit
from planner.search.partition import Partition, score
from planner.search.space import main_run, split_ok
from planner.specs.base import RecomputeMode

MAX_PARTITIONS = 200_000


def space_size(inputs: PartitionInputs, modes: tuple[RecomputeMode, ...]) -> int:
    n, s = inputs.num_layers, inputs.num_stages
    size: int = math.comb(n - 1, s - 1) * len(modes) ** n
    return size


def _splits(n: int, s: int) -> list[tuple[int, ...]]:
    return [(0, *cuts, n) for cuts in itertools.combinations(range(1, n), s - 1)]


def exhaustive_config(
    inputs: PartitionInputs,
    *,
    modes: tuple[RecomputeMode, ...],
    split: StageSplit = "any",
    ties: bool = False,
) -> ConfigResult:
    """The best partition by brute force: the first of least step time in enumeration order,
    or with `ties` (objective bubble) the tie rule's pick among those that tie it
    (exact.preferred). Raises SpecError when the space is too large."""
    size = space_size(inputs, modes)
    if size > MAX_PARTITIONS:
        raise SpecError(
            "search.mode",
            "exhaustive",
            f"{size} partitions for pp*vpp={inputs.num_stages} stages of {inputs.num_layers} "
            f"layers x {len(modes)} modes exceed the exhaustive limit of {MAX_PARTITIONS}; "
            "use mode 'optimal'",
        )
    result = ConfigResult(status="INFEASIBLE", best=None)
    tied: list[Scored] = []  # with `ties`: the feasible ones that tie the fastest so far
    for sc in scored_partitions(inputs, modes=modes, split=split):
        result.solver_calls += 1
        if not sc.score.feasible:
            continue
        if result.best is None or sc.score.step_time_s < result.best.score.step_time_s:
            result.best = sc
        if ties and ties_with(sc.score.step_time_s, result.best.score.step_time_s):
            fastest = result.best.score.step_time_s
            tied = [t for t in tied if ties_with(t.score.step_time_s, fastest)] + [sc]
    if ties and tied:
        result.best = preferred(inputs, tied)
    if result.best is not None:
        result.status = "OPTIMAL"
    return result


def scored_partitions(
    inputs: PartitionInputs, *, modes: tuple[RecomputeMode, ...], split: StageSplit = "any"
) -> Iterator[Scored]:
    """Every partition that may fit the cap (per stage, one recompute assignment for each
    distinct (backward time, activation bytes)), scored: what exhaustive_config minimises."""
    main = main_run(inputs)
    room = inputs.cap_bytes - inputs.fixed_bytes
    # in mode-index order: the first combo of each (bw, act) is the least in the tie rule's
    # order of modes (exact.tie_key)
    ordered = tuple(sorted(modes, key=MODE_INDEX.__getitem__))
    for bounds in _splits(inputs.num_layers, inputs.num_stages):
        if not split_ok(bounds, split, main):
            continue
        per_stage: list[list[tuple[tuple[RecomputeMode, ...], float]]] = []
        static = [0.0] * inputs.pp
        for s in range(inputs.num_stages):
            layers = range(bounds[s], bounds[s + 1])
            static[inputs.stage_rank[s]] += sum(inputs.static_bytes[i] for i in layers)
            seen: dict[tuple[float, float], tuple[RecomputeMode, ...]] = {}
            for combo in itertools.product(ordered, repeat=len(layers)):
                ks = [MODE_INDEX[c] for c in combo]
                bw = sum(inputs.bw_input_s[i][k] for i, k in zip(layers, ks, strict=True))
                act = sum(inputs.activation_bytes[i][k] for i, k in zip(layers, ks, strict=True))
                seen.setdefault((bw, act), combo)
            per_stage.append([(combo, key[1]) for key, combo in seen.items()])
        for choice in itertools.product(*per_stage):
            mem = list(static)
            for s, (_, act) in enumerate(choice):
                mem[inputs.stage_rank[s]] += inputs.coheld[s] * act  # at most the peak
            if max(mem) > room * (1 + 1e-12) + 1.0:  # lenient: the scorer decides
                continue
            part = Partition(bounds, tuple(m for combo, _ in choice for m in combo))
            yield Scored(part, score(inputs, part))
