"""Property bench: every plan meshplan emits for framework `meshplan` runs in the reference
runner and trains like one process.

    python bench/runner_property.py [--cases N] [--seed S] [--launcher torchrun|forked]
        [--json FILE]

For each of N random cases (`tests/profiler/runner_cases.py`: GPT or Llama, 2-11 decoder
layers, hidden 32 or 64, 2-4 ranks, every schedule, pp 1-4, dp 1-2, tp 1-2, vpp where
allowed, m below, at and above pp, mbs 1-2, ZeRO 0/1/3 where allowed, sequence parallel on or
off, and a memory cap that makes the search recompute some layers) the planner's
search, pinned to the case with `constraints.framework = "meshplan"`, emits a plan; the
runner trains it 2 steps with gloo on CPU (`--optimizer sgd`), and each rank's gradients of
both steps must equal one process replaying the same steps (rtol=1e-4, atol=1e-5).
`--launcher torchrun` (default) starts the ranks with torchrun, as the launch emitter does,
and a failure prints each rank's first error (`bench/rank_logs.py`); `forked` forks them from
a server that has imported torch (the same environment, about a second per case instead of
torchrun's start-ups). An emitted plan that `unsupported(plan, "meshplan")` refuses is
counted apart and not run (`--run-refused` runs it too): the search is to honour that check.
Prints one line per case and "K of N emitted plans ran"; exit 1 when any run failed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "profiler"))

from runner_cases import Case, check_case, emitted_plan, random_case  # noqa: E402

from bench.rank_logs import first_errors, log_args  # noqa: E402
from planner.launch.render import unsupported  # noqa: E402


def _plan_summary(plan: object) -> str:
    from planner.plan import Plan

    assert isinstance(plan, Plan)
    modes = sorted({m for s in plan.stages for m in (s.recompute or (plan.recompute,))})
    bounds = ",".join(f"{a}-{b}" for a, b in (s.layers for s in plan.stages))
    return (
        f"{plan.schedule} pp{plan.pp} dp{plan.dp} tp{plan.tp} vpp{plan.vpp} "
        f"m{plan.num_microbatches} mbs{plan.micro_batch_size} zero{plan.zero_stage}"
        f"{' sp' if plan.sequence_parallel else ''} recompute {'/'.join(modes)} [{bounds}]"
    )


def run_case(
    case: Case, workdir: Path, *, launcher: str, run_refused: bool = False
) -> dict[str, object]:
    row: dict[str, object] = {"case": case.describe()}
    plan = emitted_plan(case)
    if plan is None:
        row["status"] = "not emitted"
        return row
    row["plan"] = _plan_summary(plan)
    reasons = unsupported(plan, "meshplan")
    if reasons and not run_refused:
        row["status"] = "refused"
        row["reasons"] = reasons
        return row
    logs = workdir / "logs"
    t0 = time.perf_counter()
    try:
        steps = check_case(
            plan,
            workdir,
            launcher="torchrun" if launcher == "torchrun" else "forked",
            torchrun_args=tuple(log_args(logs)),
        )
    except AssertionError as e:
        row["status"] = "failed"
        errors = first_errors(logs) if logs.exists() else {}
        row["errors"] = {str(r): e for r, e in errors.items()} or {"-": str(e)[-1500:]}
    else:
        row["status"] = "ran"
        row["steps_compared"] = steps
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--launcher", choices=("torchrun", "forked"), default="torchrun")
    p.add_argument("--json", type=Path, default=None, help="write every case's row here")
    p.add_argument(
        "--run-refused",
        action="store_true",
        help="also run the emitted plans that unsupported(plan, 'meshplan') refuses",
    )
    a = p.parse_args(argv)
    rng = random.Random(a.seed)
    rows: list[dict[str, object]] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.cases):
            case = random_case(rng)
            work = Path(tmp) / f"case{i}"
            work.mkdir()
            row = run_case(case, work, launcher=a.launcher, run_refused=a.run_refused)
            rows.append(row)
            print(f"[{i}] {row['status']}: {row['case']} -> {row.get('plan', '-')}"
                  f" ({row.get('wall_s', 0)} s)", flush=True)  # fmt: skip
            for rank, err in dict(row.get("errors", {})).items():  # type: ignore[call-overload]
                print(f"    rank {rank}: " + str(err).replace("\n", "\n      "), flush=True)
            for reason in row.get("reasons", ()):  # type: ignore[attr-defined]
                print(f"    unsupported: {reason}", flush=True)
    emitted = [r for r in rows if r["status"] != "not emitted"]
    tried = [r for r in emitted if r["status"] != "refused"]
    ran = [r for r in tried if r["status"] == "ran"]
    print(
        f"{len(ran)} of {len(tried)} emitted plans ran (2 steps, gradients equal one "
        f"process); {len(emitted) - len(tried)} more emitted plans refused by "
        f"unsupported(plan, 'meshplan') and not run; {len(rows) - len(emitted)} of "
        f"{len(rows)} cases had no plan; seed {a.seed}, launcher {a.launcher}, "
        f"{time.perf_counter() - start:.0f} s"
    )
    if a.json is not None:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if len(ran) == len(tried) else 1


if __name__ == "__main__":
    sys.exit(main())
