"""Search speed on the Megatron-LM Table 1 rows: the full default space, A100 80 GB cap.

    python bench/search_speed.py [--time-limit 30] [--rows 0,4,9] [--workers 1] [--repeat 3]
                                 [--json]

For each row of ../shared/cases/megatron_table1.json: model, GPUs and global batch as
published, no constraint but the 80 GiB cap. Prints per row the wall time, the search status
(OPTIMAL: every configuration proven; FEASIBLE: the time limit cut it short), the plan and its
predicted TFLOP/s, then the median and max wall time. `--repeat N` searches each row N times
and reports the least wall time (and the spread): this shared 2-core machine's speed moves by
20-100 % between minutes, so one run per row is not a measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.search import search
from planner.specs import PlanRequest

CASES = Path(__file__).resolve().parents[2] / "shared" / "cases" / "megatron_table1.json"


def request_for(case: dict[str, Any], time_limit_s: float, workers: int = 1) -> PlanRequest:
    model = {k: v for k, v in case["model"].items() if k not in ("seq_length", "params_billion")}
    return PlanRequest.model_validate(
        {
            "model": {**model, "name": case["name"]},
            "cluster": case["cluster"],
            "training": {
                "global_batch_size": case["training"]["global_batch_size"],
                "seq_length": case["model"]["seq_length"],
            },
            "constraints": {"memory_cap_gib": 80},
            "search": {"time_limit_s": time_limit_s, "top_k": 0, "workers": workers},
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--rows", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT workers (1 is fastest here)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per row; the least is reported")
    args = ap.parse_args()
    cases = json.loads(CASES.read_text())["cases"]
    rows = [int(x) for x in args.rows.split(",")] if args.rows else range(len(cases))
    out = []
    for i in rows:
        case = cases[i]
        req = request_for(case, args.time_limit, args.workers)
        walls = []
        for _ in range(max(1, args.repeat)):
            t0 = time.monotonic()
            res = search(req, clock=time.monotonic)
            walls.append(time.monotonic() - t0)
        wall = min(walls)
        p = res.plan
        row = {
            "name": case["name"],
            "num_gpus": case["cluster"]["num_gpus"],
            "wall_time_s": round(wall, 3),
            "wall_times_s": [round(w, 3) for w in walls],
            "status": res.search.status,
            "configurations": res.search.candidates_considered,
            "pruned": res.search.candidates_pruned,
            "solver_calls": res.search.solver_calls,
            "best_found_at_s": res.search.details.get("best_found_at_s"),
            "plan": f"tp={p.tp} pp={p.pp} dp={p.dp} vpp={p.vpp} {p.schedule} "
            f"mbs={p.micro_batch_size}",
            "tflops_per_gpu": round(p.prediction.hardware_tflops_per_gpu, 1),
        }
        out.append(row)
        if not args.json:
            print(
                f"{row['name']:<22} {row['num_gpus']:>5} GPUs {wall:7.2f} s"
                + (f" (..{max(walls):.2f})" if len(walls) > 1 else "")
                + f" {row['status']:<8} "
                f"{row['configurations']:>6} configs {row['pruned']:>6} pruned "
                f"{row['solver_calls']:>4} solves  best at {row['best_found_at_s']} s  "
                f"{row['plan']}  {row['tflops_per_gpu']} TFLOP/s"
            )
    walls = [r["wall_time_s"] for r in out]
    summary = {"median_s": statistics.median(walls), "max_s": max(walls)}
    if args.json:
        print(json.dumps({"rows": out, **summary}, indent=2))
    else:
        print(f"median {summary['median_s']:.2f} s, max {summary['max_s']:.2f} s")


if __name__ == "__main__":
    main()
