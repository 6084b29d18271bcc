"""CLI start-up benchmark: wall time of short `meshplan` commands, run as a user runs them.

Each command runs `--runs` times as a fresh process (the venv's `meshplan` script, with
PYTHONPATH set to the checkout measured). Printed: the least and the median wall time, the
least CPU time (user + system, which a busy machine inflates least), and the heaviest top-level
imports of one run under `python -X importtime` (cumulative ms). `--root DIR` measures another
checkout, for a before/after comparison (`git archive <commit> | tar -x -C DIR`, then copy the
compiled *.so kernels into it).

    python bench/cli_startup.py [--runs 7] [--root DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

REQUEST = {
    "model": {
        "family": "gpt",
        "name": "gpt3-13b",
        "num_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "vocab_size": 51200,
    },
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
    "training": {"global_batch_size": 512, "seq_length": 2048},
}
CANDIDATE = {"tp": 2, "pp": 4, "dp": 8, "micro_batch_size": 1, "zero_stage": 1}
BUBBLE = ["bubble", "--schedule", "1f1b", "--pp", "8", "--microbatches", "32"]
BUBBLE += ["--fw-s", "1", "--bw-s", "2"]


def meshplan_command() -> list[str]:
    script = Path(sys.executable).with_name("meshplan")
    if script.exists():
        return [sys.executable, str(script)]
    found = shutil.which("meshplan")
    if found:
        return [sys.executable, found]
    return [sys.executable, "-c", "from api.cli import main; main()"]


def run_times(cmd: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of `runs` fresh runs of `cmd`. CPU time is what
    a busy machine inflates least."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return walls, cpus


def import_times_us(args: list[str], env: dict[str, str], root: Path) -> dict[str, int]:
    """Cumulative import time (µs) of each top-level module a command imports."""
    code = "import sys; from api.cli import app; app(sys.argv[1:], standalone_mode=False)"
    cmd = [sys.executable, "-X", "importtime", "-c", code, *args]
    # cwd=root: `-c` puts the working directory first on sys.path
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
    found: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)  # top level: no indent
        if m:
            found[m.group(2)] = found.get(m.group(2), 0) + int(m.group(1))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to measure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.root.resolve())}
    with tempfile.TemporaryDirectory() as tmp:
        request, candidate = Path(tmp) / "request.json", Path(tmp) / "candidate.json"
        request.write_text(json.dumps(REQUEST))
        candidate.write_text(json.dumps(CANDIDATE))
        commands = {
            "meshplan --help": ["--help"],
            "meshplan bubble ...": BUBBLE,
            "meshplan evaluate ...": [
                "evaluate", "--request", str(request), "--candidate", str(candidate),
            ],
        }  # fmt: skip
        rows: list[dict[str, Any]] = []
        for name, cli_args in commands.items():
            walls, cpus = run_times([*meshplan_command(), *cli_args], env, args.runs)
            imports = import_times_us(cli_args, env, args.root.resolve())
            heavy = sorted(imports.items(), key=lambda kv: -kv[1])[:4]
            rows.append(
                {
                    "command": name,
                    "min_s": min(walls),
                    "median_s": statistics.median(walls),
                    "cpu_min_s": min(cpus),
                    "imports_ms": {k: round(v / 1e3, 1) for k, v in heavy},
                }
            )
    if args.json:
        print(json.dumps({"root": str(args.root), "runs": args.runs, "rows": rows}, indent=2))
        return
    print(
        f"checkout {args.root}, {args.runs} fresh runs each, load average {os.getloadavg()[0]:.1f}"
    )
    for row in rows:
        top = ", ".join(f"{k} {v:.0f} ms" for k, v in row["imports_ms"].items())
        print(
            f"{row['command']:<22} wall least {row['min_s']:.3f} s median {row['median_s']:.3f} s"
            f"  CPU least {row['cpu_min_s']:.3f} s  heaviest imports: {top}"
        )


if __name__ == "__main__":
    main()
