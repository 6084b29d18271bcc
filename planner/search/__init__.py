"""Plan search: the best configuration under the memory cap, proven with OR-Tools CP-SAT.

`search(request)` enumerates the discrete configurations (planner.search.space), prunes them
with cheap bounds (planner.search.bounds) and solves each survivor's stage partition and
per-layer recompute exactly (planner.search.exact around the CP-SAT model of
planner.search.model); `"mode": "exhaustive"` brute-forces the same space instead
(planner.search.exhaustive, the oracle of the tests). Design and numbers: docs/search.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from planner.cost import evaluate
from planner.errors import InfeasibleError
from planner.plan import Plan, PlanResult, SearchStats
from planner.search.diagnosis import diagnose
from planner.search.driver import run_search
from planner.search.exact import Scored
from planner.search.explain import differences, why
from planner.search.outcome import Entry, Outcome
from planner.search.progress import SearchProgress
from planner.specs.base import RecomputeMode
from planner.specs.request import PlanRequest

__all__ = ["SearchProgress", "run_search", "search"]


def search(
    request: PlanRequest,
    *,
    on_progress: Callable[[SearchProgress], None] | None = None,
    clock: Callable[[], float] | None = None,
    cpu_clock: bool = False,
) -> PlanResult:
    """The best plan for `request`, up to `search.top_k` alternatives and search statistics.

    `on_progress(SearchProgress)` is called as configurations are settled (at most every
    tuning.progress_every_s of the search's clock, and once at the end). `clock` (e.g.
    `time.monotonic`) makes the time limit cover the whole search; without it only CP-SAT's
    own solve time is charged (the planning core reads no clock). `cpu_clock=True` says the
    clock counts CPU time (e.g. `time.process_time`): CP-SAT's solves, which CP-SAT itself
    limits by wall time, are then stopped and charged on their CPU time too, so the search
    does the same work whatever the machine's load (a user waits wall time: the service and
    the CLI leave it off).
    Raises InfeasibleError (with a diagnosis) when no configuration fits, SpecError for an
    exhaustive search over too large a space.
    """
    out = run_search(request, on_progress=on_progress, clock=clock, cpu_clock=cpu_clock)
    if out.best is None:
        diagnosis = diagnose(request, out)
        raise InfeasibleError(f"infeasible: {diagnosis['message']}", diagnosis)
    entry, best = out.best
    plan = _plan(request, out, entry, best, why=why(request, out, entry, best))
    ranked = sorted(
        (v for k, v in out.families.items() if k != entry.config.family),
        key=lambda es: (
            (es[1].score.bubble_fraction, es[1].score.step_time_s)
            if request.objective == "bubble"
            else (es[1].score.step_time_s, 0.0)
        ),
    )[: request.search.top_k]
    alternatives = tuple(
        _plan(request, out, e, sc, why=(differences(entry.config, best, e.config, sc),))
        for e, sc in ranked
    )
    verdicts = Counter(e.verdict for e in out.entries)
    stats = SearchStats(
        mode=request.search.mode,
        status="OPTIMAL" if out.status == "OPTIMAL" else "FEASIBLE",
        candidates_considered=out.num_configs,
        candidates_pruned=verdicts["memory"]
        + verdicts["pruned"]
        + verdicts["dominated"]
        + out.invalid
        + out.group_pruned
        + out.group_time_pruned
        + out.group_bubble_pruned,
        solver_calls=out.solver_calls,
        wall_time_s=out.elapsed_s,
        time_limit_s=request.search.time_limit_s,
        lower_bound_s=out.lower_bound_s,
        gap=out.gap,
        gap_tolerance=request.search.gap_tolerance,
        alternatives_requested=request.search.top_k,
        alternatives_note=out.alternatives_note,
        details={
            "configurations_solved": verdicts["solved"],
            "pruned_by_memory_floor": verdicts["memory"],
            "pruned_by_time_floor": verdicts["pruned"],
            "pruned_as_dominated": verdicts["dominated"],
            "rejected_by_checks": out.invalid,
            "pruned_by_group_memory_floor": out.group_pruned,
            "pruned_by_group_time_floor": out.group_time_pruned,
            "pruned_by_group_bubble_floor": out.group_bubble_pruned,
            "skipped_at_time_limit": verdicts["timeout"] + out.skipped,
            "path_cuts": out.cuts,
            "best_found_at_s": round(out.best_found_at_s, 3),
            "clock": ("caller" if clock is not None else "cp-sat solve time")
            + (", cp-sat on cpu time" if out.cpu_clock else ""),
            "stopped_at_gap_tolerance": out.stopped_at_gap,
            "interim_solves": out.interim_solves,
            **({"lower_bound_bubble": out.bubble_bound} if out.bubble_bound is not None else {}),
        },
    )
    return PlanResult(plan=plan, alternatives=alternatives, search=stats)


def _plan(
    request: PlanRequest, out: Outcome, entry: Entry, sc: Scored, *, why: tuple[str, ...]
) -> Plan:
    cfg = entry.config
    modes = Counter(sc.partition.modes)
    top: RecomputeMode = modes.most_common(1)[0][0]
    candidate = cfg.candidate(recompute=top, stages=sc.partition.stage_specs())
    prediction = evaluate(request, candidate, source=out.source)
    return Plan.build(request, candidate, prediction, why=why)
