"""Measured against predicted: a RunReport set beside the plan's Prediction.

Signed relative error = (predicted - measured) / measured: positive when the plan
over-predicts (e.g. predicted a slower step than measured), None when measured is 0.
"""

from __future__ import annotations

from typing import Any

from planner.plan import Prediction
from planner.runreport import RunReport


def relative_error(predicted: float, measured: float) -> float | None:
    return None if measured == 0 else (predicted - measured) / measured


def _pair(predicted: float, measured: float) -> dict[str, Any]:
    return {
        "predicted": predicted,
        "measured": measured,
        "error": relative_error(predicted, measured),
    }


def _rank_error(rank: dict[str, Any]) -> float | None:
    error: float | None = rank["memory_bytes"]["error"]
    return error


def compare(prediction: Prediction, report: RunReport) -> dict[str, Any]:
    """Step time, bubble, per-stage activation memory and per-rank peak memory, with errors."""
    stages = []
    predicted_stage = {s.stage: s for s in prediction.stages}
    for m in report.stages:
        p = predicted_stage.get(m.stage)
        if p is None:
            continue
        stages.append(
            {
                "stage": m.stage,
                "rank": m.rank,
                "activation_bytes": _pair(p.activation_bytes, m.activation_bytes),
            }
        )
    measured_rank: dict[int, float] = {}
    for m in report.stages:
        measured_rank[m.rank] = max(measured_rank.get(m.rank, 0.0), m.peak_memory_bytes)
    ranks = [
        {"rank": r.rank, "memory_bytes": _pair(r.total_bytes, measured_rank[r.rank])}
        for r in prediction.ranks
        if r.rank in measured_rank
    ]
    errors = [abs(e) for e in (_rank_error(x) for x in ranks) if e is not None]
    return {
        "step_time_s": _pair(prediction.step_time_s, report.step_time_s),
        "bubble_fraction": _pair(prediction.bubble_fraction, report.bubble_fraction),
        "stages": stages,
        "ranks": ranks,
        "worst_memory_error": max(errors) if errors else None,
    }
