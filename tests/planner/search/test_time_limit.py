"""The time limit covers the whole search when the caller passes a clock: a deep model with a
short limit ends within the limit plus one uninterruptible step."""

from __future__ import annotations

import time

from planner.search import search

from .helpers import DEEP, SLACK_S, gpt_request


def test_a_deep_model_stops_at_a_short_limit() -> None:
    request = gpt_request(
        model=DEEP,
        cluster={"gpu": "A100-SXM-80GB", "num_gpus": 512, "gpus_per_node": 8},
        training={"global_batch_size": 1024, "seq_length": 2048},
        search={"time_limit_s": 1.0, "top_k": 2},
    )
    result = search(request, clock=time.monotonic)
    stats = result.search
    assert stats.status == "FEASIBLE"  # 128 layers over ~5,000 configurations: no proof in 1 s
    assert stats.wall_time_s <= request.search.time_limit_s + SLACK_S
    assert stats.details["skipped_at_time_limit"] > 0
    assert stats.gap is not None and 0.0 < stats.gap < float("inf")
    assert result.plan.prediction.feasible
