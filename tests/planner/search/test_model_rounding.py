"""A path cut in the CP-SAT model loses less than one unit per layer and boundary to rounding:
each layer's whole term (forward, weight and input-gradient backward in its mode) is one
coefficient of its mode's count, rounded down once. The proof tolerance (exact.REL_TOL) must
exceed that loss for the incumbent and the partitions that tie it to be cut off by the bound
rather than found again by CP-SAT, one no-good at a time."""

from __future__ import annotations

import dataclasses

import pytest

from planner.search.exact import horizon_s
from planner.search.model import PartitionModel
from planner.search.partition import durations_of, schedule_of, score
from planner.search.paths import critical_path

from .cases import MODES, gpt_case, random_partition


@pytest.mark.parametrize("seed", range(20))
def test_a_cut_loses_under_one_unit_per_layer_and_boundary(seed: int) -> None:
    rng, inputs = gpt_case(47_000, seed)
    # no post time: the bound is the cut's alone (P's rows round on their own)
    inputs = dataclasses.replace(inputs, post_s=(0.0,) * inputs.num_layers)
    part = random_partition(rng, inputs)
    sc = score(inputs, part)
    model = PartitionModel(
        inputs, modes=MODES, horizon_s=horizon_s(inputs), reference_s=sc.step_time_s
    )
    _, cut = critical_path(schedule_of(inputs), durations_of(sc))
    model.add_path_cut(cut)
    bound = model.lower_bound_units(part)
    exact = sc.step_time_s * model.scale
    assert bound <= exact
    # layers (one rounded coefficient each), boundaries (their p2p term), the constant
    assert exact - bound < inputs.num_layers + inputs.num_stages
