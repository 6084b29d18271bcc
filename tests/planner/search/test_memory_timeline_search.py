"""The search charges a rank with several chunks its timeline peak, like the cost model: under
a cap between that peak and the sum of the chunks' peaks it finds the plan that really fits
(the sum would throw it away), and its optimum is the exhaustive oracle's."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from planner.cost import partition_inputs, score_split
from planner.errors import InfeasibleError
from planner.search import search
from planner.specs import Candidate, PlanRequest

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
