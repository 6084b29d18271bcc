"""The memory climb (exact._fitted, run by improve_config and the heuristic phase): where the
fastest hint is over the cap and the modes cannot buy the memory (one recompute mode, a
framework's), it moves layers off the stages holding the most micro-batches in flight until
the split fits. On Qwen3-30B-A3B under torchtitan (16 H100s, tp 2 pp 4 vpp 5 interleaved,
ZeRO-0, selective recompute everywhere) the hints that fit are far behind, and the climb
and the hill climb after it reach the exact solver's optimum."""

from __future__ import annotations

from pathlib import Path

from planner.cost import partition_inputs, resolve_costs
from planner.search.exact import SolveLimits, improve_config, solve_config
from planner.search.hints import hint_partitions
from planner.search.partition import score
from planner.search.space import enumerate_configs
from planner.specs import PlanRequest

QWEN_TT = (
    Path(__file__).parents[3] / "bench" / "cases" / "moe-qwen3-30b-a3b-16xh100-torchtitan.json"
)


def test_the_memory_climb_reaches_the_optimum_the_fitting_hints_miss() -> None:
    req = PlanRequest.model_validate_json(QWEN_TT.read_text())
    src = resolve_costs(req)
    cfg = next(
        c
        for c in enumerate_configs(req, num_layers=len(src.layers))
        if (c.tp, c.pp, c.dp, c.ep, c.vpp, c.schedule, c.micro_batch_size, c.modes)
        == (2, 4, 2, 2, 5, "interleaved-1f1b", 1, ("selective",))
    )
    inputs = partition_inputs(req, cfg.candidate(), source=src)
    hints = hint_partitions(inputs, cfg.modes, None)
    scores = [score(inputs, h) for h in hints]
    fastest = min(scores, key=lambda sc: sc.step_time_s)
    assert not fastest.feasible  # the balanced splits are over the cap
    fitting = min(sc.step_time_s for sc in scores if sc.feasible)
    found = improve_config(inputs, modes=cfg.modes, hints=hints)
    best = min((sc for sc in found if sc.score.feasible), key=lambda sc: sc.score.step_time_s)
    # the exact solver, started from it, proves it optimal
    exact = solve_config(
        inputs, modes=cfg.modes, hints=(best.partition,), limits=SolveLimits(time_limit_s=120)
    )
    assert exact.status == "OPTIMAL" and exact.best is not None
    optimum = exact.best.score.step_time_s
    assert best.score.step_time_s <= optimum * (1 + 1e-9), (best.score.step_time_s, optimum)
    assert fitting > 1.05 * optimum, (fitting, optimum)  # what the hints alone reach
