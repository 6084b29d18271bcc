"""Calibrate the cost model's constants on Megatron-LM's Table 1 (planner.calibrate).

python bench/calibrate.py [--fit NAMES] [--split | --loo] [--prior W] [--start NAME=V,...] [--json]

Each published row is an observation: its configuration under the bench's one rule
(bench/megatron_table1.py) and its measured step time (the paper-derived seconds per
iteration). Default: fit NAMES (comma-separated; default matmul_fraction,hbm_fraction,
link_fraction -- kernel_overhead_s is not determined by Table 1, whose rows all run micro-batch
1) on all ten rows by least squares on log step time, and print the constants with ranges and
each row's error before and after: how the defaults of planner/catalog/efficiency.py were found.

--split: fit NAMES (default matmul_fraction) on the five smallest rows only and print the five
largest rows' errors under that fit and under the shipped defaults (an out-of-sample check).
--loo: for each row, fit NAMES on the other nine and print that row's error (leave-one-out).

The fit's prior weight toward the start constants is chosen by leave-one-out cross-validation
(planner.calibrate.prior) unless --prior W fixes it (0: plain least squares). The start is the
shipped defaults, which were themselves fitted on all ten rows: --start
matmul_fraction=0.5 shows a fit from a start that knows nothing of the rows.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.megatron_table1 import DEFAULT_CASES, case_candidate, case_request, load_cases
from planner.calibrate import (
    Calibration,
    Measured,
    NotDetermined,
    Observation,
    calibrate,
    predict_all,
)
from planner.catalog.efficiency import CONSTANT_NAMES, DEFAULT_EFFICIENCY, Efficiency

SOURCE = "Narayanan et al. 2021, Table 1"


def table1_observations(cases_path: str | Path = DEFAULT_CASES) -> list[Observation]:
    """One observation per Table 1 row (its derived seconds per iteration as step time)."""
    return [
        Observation(
            request=case_request(case),
            candidate=case_candidate(case),
            measured=Measured(
                step_time_s=float(case["published_result"]["seconds_per_iteration_derived"])
            ),
            source=f"{SOURCE}: {case['name']}",
        )
        for case in load_cases(cases_path)
    ]


def _errors(obs: list[Observation], predicted: list[float]) -> list[float]:
    return [p / o.measured.step_time_s - 1 for o, p in zip(obs, predicted, strict=True)]


def _mean_max(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    return {"mean_abs_error": round(sum(a) / len(a), 4), "max_abs_error": round(max(a), 4)}


def _how(cal: Calibration) -> dict[str, Any]:
    """How the fit went: its prior weight (None: infinite), what it held and why, the
    leave-one-out RMS log error per prior weight."""
    return {"prior_weight": cal.prior_weight, "held": cal.held, "loo_rms": cal.loo_rms}


def full_fit(
    obs: list[Observation],
    names: list[str],
    *,
    start: Efficiency = DEFAULT_EFFICIENCY,
    prior_weight: float | None = None,
) -> dict[str, Any]:
    cal = calibrate(
        obs,
        names=names,
        scope={"source": SOURCE},
        start=start,
        prior_weight=prior_weight,
        hold_undetermined=True,
    )
    rows: list[dict[str, Any]] = [
        {
            "source": f.source,
            "error_before": round(f.error_before, 4),
            "error_after": round(f.error_after, 4),
        }
        for f in cal.fit
    ]
    return {
        "constants": cal.constants,
        "fitted": list(cal.fitted),
        "ranges": {k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in cal.ranges.items()},
        "rows": rows,
        "before": _mean_max([r["error_before"] for r in rows]),
        "after": _mean_max([r["error_after"] for r in rows]),
        **_how(cal),
    }


def split_fit(
    obs: list[Observation],
    names: list[str],
    *,
    start: Efficiency = DEFAULT_EFFICIENCY,
    prior_weight: float | None = None,
) -> dict[str, Any]:
    """Fit on the five smallest rows; the five largest under that fit and under the defaults."""
    small, large = obs[:5], obs[5:]
    cal = calibrate(
        small,
        names=names,
        scope={"source": SOURCE, "rows": "five smallest"},
        start=start,
        prior_weight=prior_weight,
        hold_undetermined=True,
    )
    fitted = _errors(large, predict_all(large, cal.efficiency))
    default = _errors(large, predict_all(large, DEFAULT_EFFICIENCY))
    return {
        "constants": cal.constants,
        "fitted": list(cal.fitted),
        "large_rows": [o.source for o in large],
        "large_errors_fitted_on_small": [round(e, 4) for e in fitted],
        "large_errors_default": [round(e, 4) for e in default],
        "fitted_on_small": _mean_max(fitted),
        "default": _mean_max(default),
        "sensitivity": {
            o.source: row
            for o, row in zip(obs, sensitivities(obs, list(CONSTANT_NAMES)), strict=True)
        },
        "small_errors_default": [
            round(e, 4) for e in _errors(small, predict_all(small, DEFAULT_EFFICIENCY))
        ],
        **_how(cal),
    }


def sensitivities(obs: list[Observation], names: list[str]) -> list[dict[str, float]]:
    """d log(step time) / d log(constant) of each row at the defaults (a 1 % step; backward
    at an upper bound): which rows exercise which constant, and how much."""
    base = predict_all(obs, DEFAULT_EFFICIENCY)
    out: list[dict[str, float]] = [{} for _ in obs]
    for name in names:
        value = getattr(DEFAULT_EFFICIENCY, name)
        step = -0.01 if name.endswith("fraction") and value * math.exp(0.01) > 1 else 0.01
        moved = predict_all(obs, DEFAULT_EFFICIENCY.replace(**{name: value * math.exp(step)}))
        for row, a, b in zip(out, moved, base, strict=True):
            row[name] = round((math.log(a) - math.log(b)) / step, 4)
    return out


def leave_one_out(
    obs: list[Observation],
    names: list[str],
    *,
    start: Efficiency = DEFAULT_EFFICIENCY,
    prior_weight: float | None = None,
) -> dict[str, Any]:
    """Each row predicted by the fit on the other nine (the fit refitted per row)."""
    rows = []
    for i, o in enumerate(obs):
        rest = obs[:i] + obs[i + 1 :]
        cal = calibrate(
            rest, names=names, start=start, prior_weight=prior_weight, hold_undetermined=True
        )
        (pred,) = predict_all([o], cal.efficiency)
        rows.append(
            {
                "source": o.source,
                "error": round(pred / o.measured.step_time_s - 1, 4),
                "constants": {n: round(cal.constants[n], 4) for n in names},
                "prior_weight": cal.prior_weight,
                "held": sorted(cal.held),
            }
        )
    return {"rows": rows, "loo": _mean_max([r["error"] for r in rows])}


def _start(text: str | None) -> Efficiency:
    if not text:
        return DEFAULT_EFFICIENCY
    values = {}
    for pair in text.split(","):
        name, _, value = pair.partition("=")
        values[name.strip()] = float(value)
    return DEFAULT_EFFICIENCY.replace(**values)


def _print_how(out: dict[str, Any]) -> None:
    w = out["prior_weight"]
    print(f"prior weight {'inf (held at the start)' if w is None else w}; leave-one-out RMS:")
    print("  " + "  ".join(f"w={k}: {100 * v:.2f}%" for k, v in out["loo_rms"].items()))
    for name, why in out["held"].items():
        print(f"  held {name}: {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default=str(DEFAULT_CASES))
    parser.add_argument("--fit", default=None, help="comma-separated constants to fit")
    parser.add_argument("--split", action="store_true", help="fit on the five smallest rows")
    parser.add_argument("--loo", action="store_true", help="leave each row out in turn")
    parser.add_argument("--prior", type=float, default=None, help="prior weight (default: CV)")
    parser.add_argument("--start", default=None, help="start constants NAME=V,... (defaults)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    obs = table1_observations(args.cases)
    default_names = (
        "matmul_fraction" if args.split else "matmul_fraction,hbm_fraction,link_fraction"
    )
    names = (args.fit or default_names).split(",")
    kw: dict[str, Any] = {"start": _start(args.start), "prior_weight": args.prior}
    try:
        if args.loo:
            out = leave_one_out(obs, names, **kw)
        elif args.split:
            out = split_fit(obs, names, **kw)
        else:
            out = full_fit(obs, names, **kw)
    except NotDetermined as exc:
        print(f"not determined: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.json:
        print(json.dumps(out, indent=1))
        return
    if args.loo:
        for r in out["rows"]:
            print(f"  {r['source']:<50} {100 * r['error']:+6.1f}%  {r['constants']}")
        lo = out["loo"]
        print(
            f"leave-one-out mean |error| {100 * lo['mean_abs_error']:.1f}%, "
            f"max {100 * lo['max_abs_error']:.1f}%"
        )
        return
    print("constants:", {k: round(v, 6) for k, v in out["constants"].items()})
    _print_how(out)
    if args.split:
        print("d log(step) / d log(constant) at the defaults, and each row's error there:")
        print(f"  {'row':<50} " + " ".join(f"{n[:12]:>12}" for n in CONSTANT_NAMES) + "   error")
        errors = out["small_errors_default"] + out["large_errors_default"]
        for (src, row), e in zip(out["sensitivity"].items(), errors, strict=True):
            cells = " ".join(f"{row[n]:+12.4f}" for n in CONSTANT_NAMES)
            print(f"  {src:<50} {cells}  {100 * e:+5.1f}%")
        print("five largest rows, step-time error (fitted on the five smallest | defaults):")
        for src, f, d in zip(
            out["large_rows"],
            out["large_errors_fitted_on_small"],
            out["large_errors_default"],
            strict=True,
        ):
            print(f"  {src:<50} {100 * f:+6.1f}%  {100 * d:+6.1f}%")
        fs, ds = out["fitted_on_small"], out["default"]
        print(
            f"mean |error| {100 * fs['mean_abs_error']:.1f}% (defaults "
            f"{100 * ds['mean_abs_error']:.1f}%), max {100 * fs['max_abs_error']:.1f}% "
            f"(defaults {100 * ds['max_abs_error']:.1f}%)"
        )
        return
    print("ranges (+-2 sigma):", out["ranges"])
    for r in out["rows"]:
        before, after = 100 * r["error_before"], 100 * r["error_after"]
        print(f"  {r['source']:<50} {before:+6.1f}% -> {after:+6.1f}%")
    b, a = out["before"], out["after"]
    print(
        f"step-time mean |error| {100 * b['mean_abs_error']:.1f}% -> "
        f"{100 * a['mean_abs_error']:.1f}%, max {100 * b['max_abs_error']:.1f}% -> "
        f"{100 * a['max_abs_error']:.1f}%"
    )


if __name__ == "__main__":
    main()
