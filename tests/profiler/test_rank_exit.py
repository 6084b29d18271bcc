"""A rank started as a program ends with its exit code and what it printed, and without the
interpreter's finalization (profiler/rank_exit.py says why: gloo's threads outlive it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from run_plan_support import make_plan

from planner.runreport import RunReport
from planner.specs.model import ModelArch
from profiler.network import NetworkProfile

ROOT = Path(__file__).resolve().parents[2]
GPT = ModelArch(
    family="gpt", name="gpt2-h64", num_layers=2, hidden_size=64, num_attention_heads=4,
    vocab_size=128,
)  # fmt: skip

# Python runs sitecustomize at every start-up: in a torchrun rank (RANK set) it registers an
# atexit handler, which only finalization runs, that leaves a file named for the rank.
SITECUSTOMIZE = """
import atexit, os
if "RANK" in os.environ:
    path = os.path.join(os.environ["MARKERS"], "finalized-" + os.environ["RANK"])
    atexit.register(lambda: open(path, "w").close())
"""


def _env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = dict(os.environ, MARKERS=str(markers), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_exit_rank_keeps_the_code_and_the_buffered_output(tmp_path: Path) -> None:
    script = (
        "import logging, sys\n"
        "from profiler.rank_exit import exit_rank\n"
        "logging.basicConfig(filename=sys.argv[1], level=logging.INFO)\n"
        "logging.info('logged')\n"
        "print('printed', end='')\n"
        "print('to stderr', end='', file=sys.stderr)\n"
        "exit_rank(3)\n"
    )
    log = tmp_path / "rank.log"
    env = _env(tmp_path) | {"RANK": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(log)], env=env, capture_output=True, text=True
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "printed", "to stderr")
    assert log.read_text() == "INFO:root:logged\n"
    assert not list((tmp_path / "markers").iterdir())  # the atexit handler never ran


def _torchrun(tmp_path: Path, *program: str) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", *program,
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list((tmp_path / "markers").iterdir())  # no rank reached finalization


def test_the_network_profiler_ends_its_ranks_before_finalization(tmp_path: Path) -> None:
    out = tmp_path / "net.json"
    _torchrun(
        tmp_path, "profiler.network", "-o", str(out), "--backend", "gloo",
        "--ops", "all_reduce", "--sizes", "1k", "--iters", "1", "--repeats", "1",
    )  # fmt: skip
    assert NetworkProfile.model_validate_json(out.read_text()).world_size == 2


def test_the_plan_runner_ends_its_ranks_before_finalization(tmp_path: Path) -> None:
    plan = make_plan(GPT, dp=2, zero_stage=1, microbatches=1)
    plan_path, report = tmp_path / "plan.json", tmp_path / "report.json"
    plan_path.write_text(plan.model_dump_json())
    _torchrun(
        tmp_path, "profiler.run_plan", "--plan", str(plan_path), "--steps", "1",
        "--warmup", "0", "--quiet", "--report", str(report),
    )  # fmt: skip
    assert RunReport.model_validate_json(report.read_text()).steps == 1
