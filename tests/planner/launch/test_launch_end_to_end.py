"""The emitted launch.sh, run for real: torchrun starts meshplan's runner on 2 CPU processes
(gloo) for a pp=2 plan of a tiny GPT, and the runner reports the plan's shape back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cost import fixed_plan
from planner.launch import Deployment, render
from planner.plan import Plan
from planner.specs import Candidate, PlanRequest

REQUEST = {
    "model": {"family": "gpt", "name": "tiny-gpt", "num_layers": 4, "hidden_size": 64,
              "num_attention_heads": 4, "vocab_size": 256},
    "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2},
    "training": {"global_batch_size": 4, "seq_length": 32},
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_emitted_launch_script_runs_the_runner(tmp_path: Path) -> None:
    request = PlanRequest.model_validate(REQUEST)
    plan = fixed_plan(request, Candidate(pp=2, schedule="1f1b", micro_batch_size=1))
    report = tmp_path / "report.json"
    dep = Deployment(
        workdir=str(tmp_path),
        port=_free_port(),
        steps=1,
        entry_args=("--warmup", "0", "--device", "cpu", "--report", str(report), "--quiet"),
    )
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    for f in bundle.files:
        (tmp_path / f.name).write_text(f.content)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    repo = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    proc = subprocess.run(["bash", str(tmp_path / "launch.sh"), "0"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    doc = json.loads(report.read_text())
    assert (doc["world_size"], doc["pp"], doc["schedule"]) == (2, 2, "1f1b")
    assert [s["rank"] for s in doc["stages"]] == [0, 1]


@pytest.mark.slow
def test_emitted_launch_script_runs_a_cp_and_ep_plan(tmp_path: Path) -> None:
    """A tiny MoE plan with cp=2 and ep=2 (the ep group is the cp group), hand-built (the
    search does not plan them yet), launched as emitted; the runner reports both."""
    from profiler.models import tiny_moe_arch

    moe = tiny_moe_arch()
    dense = {**moe.model_dump(), "moe": None, "head_dim": None}
    cluster = {**REQUEST["cluster"], "num_gpus": 1}
    request = PlanRequest.model_validate({**REQUEST, "model": dense, "cluster": cluster})
    base = fixed_plan(request, Candidate(micro_batch_size=1))
    plan = Plan.model_validate(
        {**base.model_dump(), "arch": moe.model_dump(), "cp": 2, "ep": 2, "num_gpus": 2}
    )
    report = tmp_path / "report.json"
    dep = Deployment(
        workdir=str(tmp_path),
        port=_free_port(),
        steps=1,
        entry_args=("--warmup", "0", "--device", "cpu", "--report", str(report), "--quiet"),
    )
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    for f in bundle.files:
        (tmp_path / f.name).write_text(f.content)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    repo = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    proc = subprocess.run(["bash", str(tmp_path / "launch.sh"), "0"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    doc = json.loads(report.read_text())
    assert doc["world_size"] == 2
    assert doc["notes"]["context_parallel"].startswith("cp=2")
    assert doc["notes"]["expert_parallel"].startswith("ep=2, edp=1")
