"""Predict Megatron-LM's Table 1 (Narayanan et al. 2021, weak scaling) with meshplan's cost model.

python bench/megatron_table1.py [--json] [--cases PATH] [--plan [--plan-time-limit S]]

For each published configuration (tp, pp, dp, full recompute, A100-SXM-80GB) it evaluates the
candidate below and prints {"name", "published_tflops_per_gpu", "predicted_tflops_per_gpu",
"predicted_step_time_s", "peak_memory_gib"}; TFLOP/s are counted as the paper counts them
(recomputed forward included: `hardware_tflops_per_gpu`). The summary (mean and max |error|)
goes to stderr with --json, after the table otherwise.

The paper does not report the micro-batch size or the number of virtual stages; one rule for
every row:
- micro_batch_size = 1;
- pp > 1: schedule `interleaved-1f1b` with vpp = the smallest divisor >= 2 of the decoder
  layers per pipeline rank (num_layers / pp), i.e. the least interleaving that splits every
  rank's layers into equal chunks (1 when there is no such divisor: plain `1f1b`);
- pp = 1: there is no pipeline to interleave; the row runs as `1f1b` with vpp = 1, which at
  pp = 1 is plain gradient accumulation over m = global_batch / dp micro-batches;
- recompute `full` on every decoder layer, ZeRO 0, no sequence parallel (Megatron 2021 had
  neither), balanced stages (embedding with the first stage, head with the last).
The efficiency constants are the calibrated defaults of planner/catalog/efficiency.py
(bench/calibrate.py); nothing is tuned per row.

--plan also runs the planner (planner.search, full default space, 80 GiB cap) on each row and
adds "plan" (degrees, schedule, mbs, vpp), "planned_tflops_per_gpu", "planned_step_time_s",
"plan_status", "plan_wall_time_s" and "speedup" (published configuration's predicted step time /
the plan's, same cost model), with their geometric mean.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.cost import evaluate
from planner.specs import Candidate, ClusterSpec, ModelArch, PlanRequest, TrainingSpec

GIB = 1024**3
REPO = Path(__file__).resolve().parents[1]
DEFAULT_CASES = REPO / ".." / "shared" / "cases" / "megatron_table1.json"
GPU = "A100-SXM-80GB"


def load_cases(cases_path: str | Path = DEFAULT_CASES) -> list[dict[str, Any]]:
    with open(cases_path) as fh:
        cases: list[dict[str, Any]] = json.load(fh)["cases"]
    return cases


def case_request(case: dict[str, Any]) -> PlanRequest:
    """The plan request of one row: its model, cluster and training, default constraints."""
    m = case["model"]
    arch = ModelArch(
        family=m["family"],
        name=case["name"],
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        ffn_hidden_size=m["ffn_hidden_size"],
        vocab_size=m["vocab_size"],
    )
    cl = case["cluster"]
    tr = case["training"]
    return PlanRequest(
        model=arch,
        cluster=ClusterSpec(gpu=GPU, num_gpus=cl["num_gpus"], gpus_per_node=cl["gpus_per_node"]),
        training=TrainingSpec(
            global_batch_size=tr["global_batch_size"], seq_length=tr["seq_length"], dtype="bf16"
        ),
    )


def assumed_vpp(num_layers: int, pp: int) -> int:
    """The module docstring's rule: smallest divisor >= 2 of num_layers / pp (1 at pp = 1)."""
    if pp == 1:
        return 1
    per_rank = num_layers // pp
    return next((v for v in range(2, per_rank + 1) if per_rank % v == 0), 1)


def case_candidate(case: dict[str, Any]) -> Candidate:
    """The published configuration with the assumed micro-batch size and vpp."""
    cfg = case["published_config"]
    vpp = assumed_vpp(case["model"]["num_layers"], cfg["pp"])
    return Candidate(
        tp=cfg["tp"],
        pp=cfg["pp"],
        dp=cfg["dp"],
        vpp=vpp,
        schedule="interleaved-1f1b" if vpp > 1 else "1f1b",
        micro_batch_size=1,
        zero_stage=0,
        sequence_parallel=False,
        recompute=cfg["recompute"],
    )


def rows(
    cases_path: str | Path = DEFAULT_CASES, *, efficiency: Efficiency = DEFAULT_EFFICIENCY
) -> list[dict[str, Any]]:
    """One dict per published row: published vs predicted TFLOP/s, step time and memory."""
    out = []
    for case in load_cases(cases_path):
        candidate = case_candidate(case)
        pred = evaluate(case_request(case), candidate, efficiency=efficiency)
        published = float(case["published_result"]["tflops_per_gpu_counting_recompute"])
        predicted = pred.hardware_tflops_per_gpu
        out.append(
            {
                "name": case["name"],
                "published_tflops_per_gpu": published,
                "predicted_tflops_per_gpu": round(predicted, 2),
                "predicted_step_time_s": round(pred.step_time_s, 3),
                "peak_memory_gib": round(pred.peak_memory_bytes / GIB, 2),
                "error": round((predicted - published) / published, 4),
                "published_step_time_s": case["published_result"]["seconds_per_iteration_derived"],
                "config": {
                    "tp": candidate.tp,
                    "pp": candidate.pp,
                    "dp": candidate.dp,
                    "vpp": candidate.vpp,
                    "schedule": candidate.schedule,
                    "micro_batch_size": candidate.micro_batch_size,
                },
                "bubble_fraction": round(pred.bubble_fraction, 4),
                "feasible": pred.feasible,
            }
        )
    return out


def add_plans(table: list[dict[str, Any]], cases_path: str | Path, *, time_limit_s: float) -> float:
    """Plan every row (planner.search) next to its published configuration; returns the
    geometric mean of the speedups."""
    import math
    import time

    from planner.search import search

    logs = []
    for row, case in zip(table, load_cases(cases_path), strict=True):
        req = case_request(case)
        req = req.model_copy(
            update={"search": req.search.model_copy(update={"time_limit_s": time_limit_s})}
        )
        started = time.monotonic()
        result = search(req, clock=time.monotonic)
        p = result.plan
        row["plan"] = {
            "tp": p.tp,
            "pp": p.pp,
            "dp": p.dp,
            "vpp": p.vpp,
            "schedule": p.schedule,
            "micro_batch_size": p.micro_batch_size,
            "zero_stage": p.zero_stage,
            "recompute": p.recompute,
        }
        row["planned_tflops_per_gpu"] = round(p.prediction.hardware_tflops_per_gpu, 2)
        row["planned_step_time_s"] = round(p.prediction.step_time_s, 3)
        row["plan_status"] = result.search.status
        row["plan_wall_time_s"] = round(time.monotonic() - started, 3)
        row["speedup"] = round(row["predicted_step_time_s"] / p.prediction.step_time_s, 4)
        logs.append(math.log(row["speedup"]))
    return math.exp(sum(logs) / len(logs))


def summary(table: list[dict[str, Any]]) -> dict[str, float]:
    errors = [abs(r["error"]) for r in table]
    return {
        "mean_abs_error": round(sum(errors) / len(errors), 4),
        "max_abs_error": round(max(errors), 4),
        "rows": len(errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    parser.add_argument("--cases", default=str(DEFAULT_CASES), help="megatron_table1.json")
    parser.add_argument("--plan", action="store_true", help="also plan each row (planner.search)")
    parser.add_argument("--plan-time-limit", type=float, default=10.0, help="seconds per row")
    args = parser.parse_args()
    table = rows(args.cases)
    stats = summary(table)
    if args.plan:
        stats["plan_speedup_geomean"] = round(
            add_plans(table, args.cases, time_limit_s=args.plan_time_limit), 4
        )
    if args.json:
        print(json.dumps(table, indent=1))
        print(json.dumps({"summary": stats}), file=sys.stderr)
        return
    print(
        f"{'name':<22}{'vpp':>4}{'published':>10}{'predicted':>10}{'error':>8}"
        f"{'step_s':>9}{'mem_GiB':>9}{'bubble':>8}"
    )
    for r in table:
        print(
            f"{r['name']:<22}{r['config']['vpp']:>4}{r['published_tflops_per_gpu']:>10.1f}"
            f"{r['predicted_tflops_per_gpu']:>10.1f}{100 * r['error']:>7.1f}%"
            f"{r['predicted_step_time_s']:>9.2f}{r['peak_memory_gib']:>9.1f}"
            f"{r['bubble_fraction']:>8.3f}"
        )
    for r in table if args.plan else ():
        print(
            f"{r['name']:<22} plan {r['plan']} {r['planned_tflops_per_gpu']:.1f} TFLOP/s, "
            f"speedup x{r['speedup']:.3f} ({r['plan_status']}, {r['plan_wall_time_s']:.1f} s)"
        )
    if args.plan:
        print(f"plan speedup, geometric mean x{stats['plan_speedup_geomean']:.3f}")
    print(
        f"mean |error| {100 * stats['mean_abs_error']:.1f}%, "
        f"max |error| {100 * stats['max_abs_error']:.1f}% over {stats['rows']} rows "
        f"(Calculon: 7.9% mean, 13.7% max)"
    )


if __name__ == "__main__":
    main()
