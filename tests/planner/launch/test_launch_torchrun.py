"""Every emitted torchrun command parses with torch's own parser and matches the plan."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from launch_plans import GPT_1B, LLAMA_8B, make_plan
from torchrun_parser import parse_torchrun

from planner.errors import SpecError
from planner.launch import Deployment, render
from planner.plan import Plan

SHAPES: dict[str, tuple[Plan, Deployment, int, int]] = {
    # name: (plan, deployment, expected nodes, expected nproc per node)
    "1gpu": (make_plan(gbs=8), Deployment(), 1, 1),
    "tp8-one-node": (make_plan(tp=8, gbs=16), Deployment(), 1, 8),
    "tp4pp2dp2-hosts": (
        make_plan(tp=4, pp=2, dp=2, gbs=64),
        Deployment(hosts=("gpu-a", "gpu-b")),
        2,
        8,
    ),
    "tp2pp4dp4-4nodes": (
        make_plan(arch=GPT_1B, tp=2, pp=4, dp=4, gbs=128, schedule="gpipe"),
        Deployment(nodes=4, port=29611, rdzv_id="job-7", max_restarts=3),
        4,
        8,
    ),
    "pp4vpp2-4x2": (
        make_plan(pp=4, vpp=2, dp=2, schedule="interleaved-1f1b", gbs=64),
        Deployment(gpus_per_node=2),
        4,
        2,
    ),
    "64gpus-default": (make_plan(tp=8, pp=4, dp=2, gbs=256), Deployment(), 8, 8),
}


def torchrun_argv(command: str) -> list[str]:
    """The words after `torchrun`, skipping leading VAR=value assignments."""
    words = shlex.split(command)
    i = 0
    while "=" in words[i] and not words[i].startswith("-"):
        i += 1
    assert words[i] == "torchrun", command
    return words[i + 1 :]


@pytest.mark.parametrize("name", list(SHAPES))
def test_commands_parse_with_torchs_parser_and_match_the_plan(name: str) -> None:
    plan, dep, nodes, nproc = SHAPES[name]
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    assert len(bundle.commands) == nodes
    head = dep.hosts[0] if dep.hosts else ("localhost" if nodes == 1 else "$HEAD_NODE")
    for command in bundle.commands:
        assert "--node-rank" not in torchrun_argv(command)  # c10d assigns node ranks
        args = parse_torchrun(torchrun_argv(command))
        assert args.nnodes == str(nodes)
        assert args.nproc_per_node == str(nproc)
        assert int(args.nnodes) * int(args.nproc_per_node) == plan.tp * plan.pp * plan.dp
        assert args.node_rank == 0
        assert args.rdzv_backend == "c10d"
        assert args.rdzv_endpoint == f"{head}:{dep.port}"
        assert args.rdzv_id == (dep.rdzv_id or "meshplan-0123456789ab")
        assert args.max_restarts == dep.max_restarts
        assert args.module is True
        assert args.training_script == "profiler.run_plan"
        assert args.training_script_args[:2] == ["--plan", "plan.json"]
    assert Plan.model_validate_json(bundle.file("plan.json").content) == plan


def test_launch_script_runs_the_same_command(tmp_path: Path) -> None:
    """Run launch.sh for real with a stand-in `torchrun` that prints its arguments."""
    plan, dep, _, nproc = SHAPES["tp4pp2dp2-hosts"]
    bundle = render(
        plan,
        dep.model_copy(update={"workdir": str(tmp_path)}),
        target="torchrun",
        framework="meshplan",
    )
    script = bundle.file("launch.sh")
    assert script.mode == 0o755
    (tmp_path / "launch.sh").write_text(script.content)
    subprocess.run(["bash", "-n", str(tmp_path / "launch.sh")], check=True)
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$OMP_NUM_THREADS" "$@"\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env["PATH"] = f"{fake.parent}:{env['PATH']}"
    out = subprocess.run(
        ["bash", str(tmp_path / "launch.sh")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0] == "1"  # OMP_NUM_THREADS exported
    args = parse_torchrun(out[1:])
    assert (args.nnodes, args.nproc_per_node) == ("2", str(nproc))
    assert args.rdzv_endpoint == "gpu-a:29500"
    assert out[1:] == torchrun_argv(bundle.commands[1])


def test_torchrun_draws_no_node_rank_warning(caplog: pytest.LogCaptureFixture) -> None:
    """torch's config_from_args warns when a node_rank is given with c10d; none is given."""
    torch_run = pytest.importorskip("torch.distributed.run")
    plan, dep, nodes, nproc = SHAPES["tp4pp2dp2-hosts"]
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    assert len(set(bundle.commands)) == 1 and len(bundle.commands) == nodes
    args = parse_torchrun(torchrun_argv(bundle.commands[0]))
    with caplog.at_level("WARNING"):
        config, _, _ = torch_run.config_from_args(args)
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (nodes, nodes, nproc)
    assert not [r for r in caplog.records if "node_rank" in r.getMessage()]


def test_steps_and_extra_args_reach_the_runner() -> None:
    plan = make_plan(tp=2, gbs=8)
    dep = Deployment(steps=20, entry_args=("--warmup", "3"))
    (command,) = render(plan, dep, target="torchrun", framework="meshplan").commands
    args = parse_torchrun(torchrun_argv(command))
    assert args.training_script_args == ["--plan", "plan.json", "--steps", "20", "--warmup", "3"]


@pytest.mark.parametrize(
    ("dep", "field"),
    [
        (Deployment(nodes=3), "deployment.nodes"),
        (Deployment(gpus_per_node=3), "deployment.gpus_per_node"),
        (Deployment(hosts=("a", "b", "c")), "deployment.nodes"),
        (Deployment(nodes=2, hosts=("a",)), "deployment.hosts"),
    ],
)
def test_a_deployment_that_does_not_fit_the_plan_names_the_field(
    dep: Deployment, field: str
) -> None:
    plan = make_plan(tp=8, gbs=8)  # 8 GPUs
    with pytest.raises(SpecError) as info:
        render(plan, dep, target="torchrun", framework="meshplan")
    assert info.value.field == field
    assert "8" in str(info.value)


def test_env_holds_omp_threads_and_the_users_variables() -> None:
    plan = make_plan(tp=2, gbs=8)
    dep = Deployment(env={"NCCL_DEBUG": "INFO", "FOO": "a b"}, omp_num_threads=4)
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    words = shlex.split(bundle.commands[0])
    assert words[:3] == ["OMP_NUM_THREADS=4", "NCCL_DEBUG=INFO", "FOO=a b"]
    assert "export FOO='a b'" in bundle.file("launch.sh").content
    assert LLAMA_8B.display_name in bundle.file("launch.sh").content


def test_runner_accepts_the_arguments_meshplan_emits() -> None:
    """The runner's own parser (profiler/runner/options.py) reads what follows `-m`."""
    options = pytest.importorskip("profiler.runner.options")
    plan = make_plan(tp=2, pp=2, gbs=8)
    dep = Deployment(steps=5, entry_args=("--warmup", "1"))
    (command,) = render(plan, dep, target="torchrun", framework="meshplan").commands
    args = parse_torchrun(torchrun_argv(command))
    parsed = options.parse_args(args.training_script_args)
    assert str(parsed.plan_path) == "plan.json"
    assert (parsed.steps, parsed.warmup) == (5, 1)


ENTRY = {
    "meshplan": (True, "profiler.run_plan"),
    "megatron": (False, "pretrain_gpt.py"),
    "torchtitan": (True, "torchtitan.train"),
    "deepspeed": (False, "train.py"),
}


@pytest.mark.parametrize("framework", list(ENTRY))
@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_every_frameworks_commands_parse(framework: str, nodes: int) -> None:
    plan = make_plan(tp=2, pp=2, dp=4, zero=3 if framework == "torchtitan" else 0, gbs=64)
    if framework == "torchtitan":
        plan = make_plan(tp=4, dp=4, zero=3, gbs=64)
    dep = Deployment(nodes=nodes, rdzv_id="r1", port=29400)
    bundle = render(plan, dep, target="torchrun", framework=framework)  # type: ignore[arg-type]
    assert len(bundle.commands) == nodes
    module, script = ENTRY[framework]
    for command in bundle.commands:
        args = parse_torchrun(torchrun_argv(command))
        assert (args.nnodes, args.nproc_per_node) == (str(nodes), str(16 // nodes))
        assert (args.node_rank, args.rdzv_id) == (0, "r1")
        assert args.rdzv_endpoint == ("localhost:29400" if nodes == 1 else "$HEAD_NODE:29400")
        assert (args.module, args.training_script) == (module, script)
