"""Optimal mode (CP-SAT + path cuts) vs the exhaustive oracle on random small requests.

    python bench/solver_vs_exhaustive.py [--cases 200] [--seed 0]
                                         [--kinds plain,framework,bubble,cp,moe]

Requests: random ModelProfiles with 3-6 heterogeneous layers, 1-16 GPUs, two random schedules,
caps from loose to infeasible (tests/planner/search/random_requests.py): case i of seed s is
`random_request(Random(s * 100000 + i))` (kind `plain`). Each case also gives two variants,
drawn from a generator of their own so that the plain cases stay what they were:
- `framework`: the same request limited to what one framework can run
  (`constraints.framework` megatron, torchtitan or deepspeed, drawn; the request's schedules
  kept where the framework runs them, else the framework's own);
- `bubble`: the same request with objective `bubble` (the least bubble fraction, ties broken by
  step time).
Two kinds draw requests of their own (tests/planner/search/random_folded.py; case i of seed s
from `Random(f"{kind}-{s}-{i}")`): analytic models of 2-3 decoder blocks on 2-8 GPUs, seq
2K-4K, caps 0.6-80 GiB, searching cp in {1, 2, 4} with both K/V exchanges:
- `cp`: a dense llama or gpt;
- `moe`: a tiny MoE model (2-8 experts, top-1 or 2, shared expert or not, first layer dense
  or not): ep and etp searched too.
The two modes agree when they give the same feasibility verdict and, when feasible, equal step
times to a relative 1e-9 (`bubble`: equal step times and equal bubble fractions to 1e-9; both
modes rank a configuration by the partition that the tie rule picks among those that tie on
step time, planner.search.exact.tie_key, docs/search.md).
Prints one line per disagreement and the agreement counts per kind.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "planner" / "search"))

from random_folded import FOLDED_KINDS, random_folded_request
from random_requests import random_request

from planner.errors import InfeasibleError
from planner.launch.capabilities import CAPABILITIES
from planner.plan import Prediction
from planner.search import search
from planner.search.explain import CONFIG_FIELDS
from planner.specs import PlanRequest

KINDS = ("plain", "framework", "bubble", *FOLDED_KINDS)
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


@dataclass(frozen=True)
class Solved:
    prediction: Prediction
    config: tuple[object, ...]  # CONFIG_FIELDS of the plan


def solve(request: PlanRequest, mode: str) -> Solved | None:
    req = request.model_copy(update={"search": request.search.model_copy(update={"mode": mode})})
    try:
        plan = search(req).plan
    except InfeasibleError:
        return None
    return Solved(plan.prediction, tuple(getattr(plan, name) for name in CONFIG_FIELDS))


def variant(request: PlanRequest, kind: str, rng: random.Random) -> PlanRequest:
    """The case's request of `kind` (module docstring)."""
    if kind == "plain":
        return request
    if kind == "bubble":
        return request.model_copy(update={"objective": "bubble"})
    framework = rng.choice(FRAMEWORKS)
    runs = CAPABILITIES[framework].schedules
    kept = tuple(s for s in request.constraints.schedules or () if s in runs) or None
    constraints = request.constraints.model_copy(update={"framework": framework, "schedules": kept})
    return PlanRequest.model_validate(
        {**request.model_dump(), "constraints": constraints.model_dump()}
    )


def agree(got: Solved | None, want: Solved | None, kind: str) -> bool:
    """The module docstring's agreement: the same verdict and step time; objective bubble,
    the same bubble fraction too (a different one is a miss, whatever the configuration)."""
    if got is None or want is None:
        return got is None and want is None
    a, b = got.prediction, want.prediction
    same_time = abs(a.step_time_s - b.step_time_s) <= 1e-9 * b.step_time_s
    if kind == "bubble":
        return same_time and abs(a.bubble_fraction - b.bubble_fraction) <= 1e-9
    return same_time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"some of {','.join(KINDS)}")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if not set(kinds) <= set(KINDS):
        print(f"--kinds: {sorted(set(kinds) - set(KINDS))} unknown; known: {KINDS}")
        sys.exit(2)
    counts = {k: [0, 0] for k in kinds}  # agree, feasible
    seconds = {k: [0.0, 0.0] for k in kinds}  # optimal, exhaustive
    for i in range(args.cases):
        base = random_request(random.Random(args.seed * 100_000 + i))
        own = random.Random(f"variant-{args.seed}-{i}")
        for kind in kinds:
            request = (
                random_folded_request(random.Random(f"{kind}-{args.seed}-{i}"), kind)
                if kind in FOLDED_KINDS
                else variant(base, kind, own)
            )
            t0 = time.perf_counter()
            got = solve(request, "optimal")
            t1 = time.perf_counter()
            want = solve(request, "exhaustive")
            t2 = time.perf_counter()
            seconds[kind][0] += t1 - t0
            seconds[kind][1] += t2 - t1
            same = agree(got, want, kind)
            counts[kind][0] += same
            counts[kind][1] += want is not None
            if not same:
                framework = request.constraints.framework or "-"
                print(
                    f"case {i} {kind} (framework {framework}): optimal "
                    f"{_text(got)} exhaustive {_text(want)}"
                )
    for kind, (agreed, feasible) in counts.items():
        t_opt, t_ex = seconds[kind]
        print(
            f"{kind}: {agreed}/{args.cases} agree ({feasible} feasible, "
            f"{args.cases - feasible} infeasible); optimal {t_opt:.1f} s, exhaustive "
            f"{t_ex:.1f} s in total"
        )
    total = sum(a for a, _ in counts.values())
    print(f"all: {total}/{args.cases * len(kinds)} agree")


def _text(s: Solved | None) -> str:
    if s is None:
        return "infeasible"
    p = s.prediction
    return f"{p.step_time_s!r} s (bubble {p.bubble_fraction!r}) at {s.config}"


if __name__ == "__main__":
    main()
