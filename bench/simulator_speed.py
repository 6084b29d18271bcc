"""How fast is the schedule simulator? Prints per-call times (ms) as JSON.

python bench/simulator_speed.py [--pp 64] [--vpp 2] [--microbatches 48] [--repeat 50]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.schedules import StageDurations, generate, simulate
from planner.specs.base import ScheduleName


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pp", type=int, default=64)
    parser.add_argument("--vpp", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    results = []
    cases: list[tuple[ScheduleName, int]] = [
        ("1f1b", 1),
        ("interleaved-1f1b", args.vpp),
        ("zb-h1", 1),
        ("zbv", 2),
    ]
    for name, vpp in cases:
        stages = args.pp * vpp
        durations = StageDurations(
            fw_s=tuple(0.010 + 0.0001 * s for s in range(stages)),
            bw_s=(0.020,) * stages,
            w_s=(0.008,) * stages,
            p2p_s=(0.0005,) * stages,
        )
        t0 = time.perf_counter()
        schedule = generate(name, pp=args.pp, vpp=vpp, num_microbatches=args.microbatches)
        first = simulate(schedule, durations)  # generates, validates order, compiles
        t1 = time.perf_counter()
        for _ in range(args.repeat):
            simulate(schedule, durations)
        t2 = time.perf_counter()
        for _ in range(args.repeat):
            simulate(schedule, durations, with_timeline=False)
        t3 = time.perf_counter()
        results.append(
            {
                "schedule": name,
                "pp": args.pp,
                "vpp": vpp,
                "microbatches": args.microbatches,
                "actions": sum(len(o) for o in schedule.orders),
                "first_call_ms": round((t1 - t0) * 1e3, 2),
                "simulate_ms": round((t2 - t1) / args.repeat * 1e3, 3),
                "simulate_no_timeline_ms": round((t3 - t2) / args.repeat * 1e3, 3),
                "bubble_fraction": round(first.bubble_fraction, 4),
            }
        )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
