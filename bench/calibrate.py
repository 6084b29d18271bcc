"""Calibrate the efficiency model's two constants on Megatron-LM's Table 1.

python bench/calibrate.py [--cases PATH] [--json]

A plain grid search over (matmul_fraction, hbm_fraction) that minimises the mean |error| of
the predicted TFLOP/s per GPU over all rows (ties: the smaller max |error|), with the bench's
one rule for micro-batch size and vpp (bench/megatron_table1.py). The winner is what
planner/catalog/efficiency.py ships as its defaults; docs/cost-model.md records the result.
This fits two numbers to ten rows: an in-sample fit, not a validation.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.megatron_table1 import DEFAULT_CASES, rows, summary
from planner.catalog.efficiency import Efficiency


def frange(lo: float, hi: float, step: float) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + i * step, 4) for i in range(n + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=str(DEFAULT_CASES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for mm in frange(0.55, 0.75, 0.005):
        for hbm in frange(0.50, 1.00, 0.05):
            stats = summary(rows(args.cases, efficiency=Efficiency(mm, hbm)))
            results.append((stats["mean_abs_error"], stats["max_abs_error"], mm, hbm))
    results.sort()
    best = [
        {"matmul_fraction": mm, "hbm_fraction": hbm, "mean_abs_error": mean, "max_abs_error": mx}
        for mean, mx, mm, hbm in results[:10]
    ]
    if args.json:
        print(json.dumps({"grid_points": len(results), "best": best}, indent=1))
        return
    print(f"{len(results)} grid points; best 10 by mean |error| (then max):")
    for b in best:
        print(
            f"  matmul_fraction={b['matmul_fraction']:.3f} hbm_fraction={b['hbm_fraction']:.2f}"
            f"  mean {100 * b['mean_abs_error']:.2f}%  max {100 * b['max_abs_error']:.2f}%"
        )


if __name__ == "__main__":
    main()
