"""The search charges a rank with several chunks its timeline peak, like the cost model: under
a cap between that peak and the sum of the chunks' peaks it finds the plan that really fits
(the sum would throw it away), and its optimum is the exhaustive oracle's."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from planner.cost import partition_inputs, score_split
from planner.errors import InfeasibleError
from planner.search import search
from planner.search.exact import SolveLimits, solve_config
from planner.search.exhaustive import exhaustive_config
from planner.search.model import seed_points
from planner.specs import Candidate, PlanRequest
from planner.specs.base import RecomputeMode

from .cases import pipeline_inputs

MODES: tuple[RecomputeMode, ...] = ("none", "full")

GIB = 1024**3


def request(cap_gib: float | None, mode: str = "optimal") -> PlanRequest:
    doc: dict[str, object] = {
        "model": {
            "family": "gpt",
            "num_layers": 8,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "vocab_size": 32000,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2},
        "training": {"global_batch_size": 16, "seq_length": 2048},
        "constraints": {
            "schedules": ["interleaved-1f1b"],
            "tp": [1],
            "pp": [2],
            "vpp": [2],
            "micro_batch_sizes": [2],
            "zero_stages": [0],
            "recompute": ["none"],
            "memory_reserve_gib": 0.0,
        },
        "search": {"mode": mode},
    }
    if cap_gib is not None:
        doc["constraints"]["memory_cap_gib"] = cap_gib  # type: ignore[index]
    return PlanRequest.model_validate(doc)


def least_peaks_bytes(req: PlanRequest) -> tuple[float, float]:
    """The least peak memory over every stage split of the candidate: (each rank charged its
    timeline peak, each rank charged the sum of its chunks' peaks: the former rule, which is
    what PartitionInputs without held points charge)."""
    cand = Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=2)
    inputs = partition_inputs(req, cand)
    summed = dataclasses.replace(inputs, held_points=())
    n, modes = inputs.num_layers, ("none",) * inputs.num_layers
    best = [float("inf"), float("inf")]
    for cuts in itertools.combinations(range(1, n), inputs.num_stages - 1):
        bounds = (0, *cuts, n)
        for i, x in enumerate((inputs, summed)):
            best[i] = min(best[i], score_split(x, bounds, modes).peak_memory_bytes)
    return best[0], best[1]


def test_a_plan_that_fits_only_by_its_timeline_peak_is_found() -> None:
    timeline, summed = least_peaks_bytes(request(None))
    assert timeline < summed * 0.95  # the chunks do not peak together
    cap_gib = (timeline + summed) / 2 / GIB
    # charged the sum of its chunks' peaks, no split would fit under this cap
    plan = search(request(cap_gib)).plan
    pred = plan.prediction
    assert pred.feasible and pred.peak_memory_bytes <= cap_gib * GIB
    oracle = search(request(cap_gib, mode="exhaustive")).plan.prediction
    assert pred.step_time_s == pytest.approx(oracle.step_time_s, rel=1e-9)


def test_below_every_partitions_timeline_peak_nothing_fits() -> None:
    timeline, _ = least_peaks_bytes(request(None))
    with pytest.raises(InfeasibleError):
        search(request(timeline * (1 - 1e-6) / GIB))


@pytest.mark.parametrize("seed", range(8))
def test_rows_added_lazily_keep_the_optimum(seed: int) -> None:
    """pp = 4 with 2 chunks per rank: ranks have up to 8 held points, the model starts with a
    row for at most 3 of them (seed_points) and adds the others as decoded partitions break
    them; its optimum is the exhaustive oracle's under caps from loose to infeasible."""
    rng = random.Random(5100 + seed)
    vpp = 2
    n = 4 * vpp + rng.randint(1, 2)
    block_act = rng.uniform(1.0, 3.0)
    act = ((0.5,) * 3, *([(block_act, block_act * 0.5, block_act * 0.15)] * (n - 2)), (2.0,) * 3)
    bw = rng.uniform(0.5, 1.0)
    inputs = pipeline_inputs(
        "interleaved-1f1b",
        4,
        vpp,
        8,
        fw=(0.1, *([rng.uniform(0.5, 1.0)] * (n - 2)), 0.4),
        bw_input=((0.1,) * 3, *([(bw, bw * 1.05, bw * 1.4)] * (n - 2)), (0.4,) * 3),
        bw_weight=(0.05, *([0.3] * (n - 2)), 0.2),
        p2p=(0.01,) * n,
        act=act,
        static=(1.0,) * n,
        post=(0.0,) * n,
        cap=0.0,
        modes=MODES,
    )
    assert max(len(p) for p in inputs.rank_points) > max(
        len(seed_points(inputs, r)) for r in range(4)
    )
    loose = sum(a[0] * max(inputs.inflight) for a in act) + n
    for share in (0.15, 0.3, 0.6):
        x = dataclasses.replace(inputs, cap_bytes=1.0 + loose * share)
        oracle = exhaustive_config(x, modes=MODES).best
        got = solve_config(x, modes=MODES, limits=SolveLimits(workers=1)).best
        assert (oracle is None) == (got is None), share
        if oracle is not None and got is not None:
            assert got.score.feasible
            assert got.score.step_time_s == pytest.approx(oracle.score.step_time_s, rel=1e-9)
