"""A linear-programming floor of one configuration (GLOP), to prune it without CP-SAT.

The LP relaxes the CP-SAT model of planner.search.model: x[g, s, k] >= 0 is a *fractional*
number of run g's layers in stage s with mode k (only stages that can hold run g), every stage
holds at least one layer, contiguity is dropped. Objective: minimise T + P with
    T >= each seed path cut (its length in x plus its length over the per-action overhead
         alone, a constant; p2p left out: >= 0),
    P >= each rank's DP-sync + optimizer time,
    memory per rank <= cap - fixed.
Every real partition is a feasible point whose objective is at most its simulated step time,
so the LP optimum is a lower bound of the configuration's optimum. It is used only with a
relative margin (1e-6) above GLOP's tolerances, and only on models small enough to build fast.
The model itself is planner.search.cutlp.CutLP (which the cutting-plane phase keeps between
solves); this is its one-shot use.
"""

from __future__ import annotations

from planner.cost import PartitionInputs
from planner.search.cutlp import CutLP
from planner.search.paths import PathCut
from planner.specs.base import RecomputeMode

MAX_TERMS = 60_000  # cuts x variables built in Python; above this the LP is skipped
MARGIN = 1e-6


def lp_floor_s(
    inputs: PartitionInputs, modes: tuple[RecomputeMode, ...], cuts: list[PathCut]
) -> float | None:
    """A lower bound of the step time of every partition, or None (not computed)."""
    lp = CutLP(inputs, modes)
    if len(lp.x) * (len(cuts) + 2 * inputs.pp + 1) > MAX_TERMS:
        return None
    for cut in cuts:
        lp.add_cut(cut)
    point = lp.solve()
    return point.value_s if point is not None else None
