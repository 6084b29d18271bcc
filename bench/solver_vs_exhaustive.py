"""Optimal mode (CP-SAT + path cuts) vs the exhaustive oracle on random small requests.

    python bench/solver_vs_exhaustive.py [--cases 200] [--seed 0]

Requests: random ModelProfiles with 3-6 heterogeneous layers, 1-16 GPUs, two random schedules,
caps from loose to infeasible (tests/planner/search/random_requests.py). Prints one line per
disagreement and the agreement counts: step times equal to a relative 1e-9 and the same
feasibility verdict.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "planner" / "search"))

from random_requests import random_request

from planner.errors import InfeasibleError
from planner.search import search
from planner.specs import PlanRequest


def solve(request: PlanRequest, mode: str) -> float | None:
    req = request.model_copy(update={"search": request.search.model_copy(update={"mode": mode})})
    try:
        return search(req).plan.prediction.step_time_s
    except InfeasibleError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    agree = feasible = 0
    t_opt = t_ex = 0.0
    for i in range(args.cases):
        request = random_request(random.Random(args.seed * 100_000 + i))
        t0 = time.perf_counter()
        got = solve(request, "optimal")
        t1 = time.perf_counter()
        want = solve(request, "exhaustive")
        t2 = time.perf_counter()
        t_opt, t_ex = t_opt + t1 - t0, t_ex + t2 - t1
        same = (got is None and want is None) or (
            got is not None and want is not None and abs(got - want) <= 1e-9 * want
        )
        agree += same
        feasible += want is not None
        if not same:
            print(f"case {i}: optimal {got} exhaustive {want}")
    print(
        f"{agree}/{args.cases} agree ({feasible} feasible, {args.cases - feasible} infeasible); "
        f"optimal {t_opt:.1f} s, exhaustive {t_ex:.1f} s in total"
    )


if __name__ == "__main__":
    main()
