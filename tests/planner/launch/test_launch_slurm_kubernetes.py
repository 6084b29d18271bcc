"""Slurm scripts pass `bash -n` and run (with stand-in srun/scontrol) to a torchrun line torch
parses; Kubernetes manifests load as YAML and carry the fields the operators require."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from launch_plans import make_plan, ranges_from_decoders
from pydantic import ValidationError
from torchrun_parser import parse_torchrun

from planner.launch import FRAMEWORKS, Deployment, render
from planner.plan import Plan

PLAN = make_plan(tp=4, pp=2, dp=2, gbs=64, zero=1, sp=True, recompute="full",
                 stages=ranges_from_decoders([16, 16]))  # fmt: skip
SMALL = make_plan(tp=2, dp=2, zero=3, gbs=16)  # every framework can run these two


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_slurm_script_passes_bash_n_and_asks_for_the_nodes(framework: str, tmp_path: Path) -> None:
    plan = SMALL if framework in ("torchtitan", "deepspeed") else PLAN
    dep = Deployment(nodes=2, partition="gpu", account="proj", time="02:00:00", job_name="run-1")
    bundle = render(plan, dep, target="slurm", framework=framework)  # type: ignore[arg-type]
    script = bundle.file("job.sbatch")
    path = tmp_path / "job.sbatch"
    path.write_text(script.content)
    subprocess.run(["bash", "-n", str(path)], check=True)
    directives = dict(
        line.removeprefix("#SBATCH --").split("=", 1)
        for line in script.content.splitlines()
        if line.startswith("#SBATCH --")
    )
    assert directives["nodes"] == "2"
    assert directives["gpus-per-node"] == str(plan.num_gpus // 2)
    assert directives["ntasks-per-node"] == "1"
    assert (directives["partition"], directives["account"]) == ("gpu", "proj")
    assert (directives["time"], directives["job-name"]) == ("02:00:00", "run-1")
    assert {"output", "error"} <= directives.keys()
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script.content
    assert bundle.commands == ("sbatch job.sbatch",)


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)


def test_slurm_script_runs_srun_torchrun_with_the_head_node(tmp_path: Path) -> None:
    dep = Deployment(nodes=2, workdir=str(tmp_path), port=29777)
    bundle = render(PLAN, dep, target="slurm", framework="meshplan")
    (tmp_path / "job.sbatch").write_text(bundle.file("job.sbatch").content)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake(bin_dir, "scontrol", 'printf "gpu-07\\ngpu-08\\n"')
    _fake(bin_dir, "srun", 'printf "%s\\n" "$@"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", SLURM_JOB_NODELIST="gpu-[07-08]",
               SLURM_JOB_ID="4242")  # fmt: skip
    words = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=env, check=True,
                           capture_output=True, text=True).stdout.splitlines()  # fmt: skip
    assert words[:4] == ["--nodes", "2", "--ntasks-per-node", "1"]
    args = parse_torchrun(words[words.index("torchrun") + 1 :])
    assert (args.nnodes, args.nproc_per_node) == ("2", "8")
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "gpu-07:29777", "4242")
    assert args.module and args.training_script == "profiler.run_plan"


def test_slurm_container_image_uses_pyxis() -> None:
    dep = Deployment(nodes=2, image="nvcr.io/nvidia/pytorch:25.01-py3")
    script = render(PLAN, dep, target="slurm", framework="megatron").file("job.sbatch").content
    assert "--container-image=nvcr.io/nvidia/pytorch:25.01-py3" in script


def manifests(plan: Plan, dep: Deployment, framework: str, name: str) -> list[dict[str, Any]]:
    bundle = render(plan, dep, target="kubernetes", framework=framework)  # type: ignore[arg-type]
    return list(yaml.safe_load_all(bundle.file(name).content))


def _torchrun_args(command: list[str], **pet: str) -> Any:
    assert command[0] == "torchrun"
    old = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PET_")}
    os.environ.update(pet)
    try:
        return parse_torchrun(command[1:])
    finally:
        for k in pet:
            os.environ.pop(k, None)
        os.environ.update(old)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_pytorchjob_carries_what_the_training_operator_requires(framework: str) -> None:
    plan = SMALL if framework in ("torchtitan", "deepspeed") else PLAN
    dep = Deployment(nodes=plan.num_gpus // 2, image="repo/img:1", namespace="ml",
                     job_name="llama-run")  # fmt: skip
    docs = manifests(plan, dep, framework, "pytorchjob.yaml")
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["metadata"] == {"name": "llama-run", "namespace": "ml"}
    spec = job["spec"]
    nodes, gpus = plan.num_gpus // 2, 2
    assert spec["nprocPerNode"] == str(gpus)  # a string in kubeflow.org/v1
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {"replicas": 0})["replicas"] == nodes - 1
    for role in replicas.values():
        (container,) = role["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == "repo/img:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert container["ports"][0]["name"] == "pytorchjob-port"
        command = [w.replace("$(MASTER_ADDR)", "llama-run-master-0") for w in container["command"]]
        args = _torchrun_args(command)
        assert (args.nnodes, args.nproc_per_node) == (str(nodes), str(gpus))
        assert args.rdzv_endpoint == "llama-run-master-0:29500"
    configs = [d for d in docs if d["kind"] == "ConfigMap"]
    if configs:
        (cm,) = configs
        mounts = container["volumeMounts"]
        assert {"name": "meshplan-config", "mountPath": "/etc/meshplan", "readOnly": True} in mounts
        referenced = [w for w in container["command"] if w.startswith("/etc/meshplan/")]
        assert referenced
        assert all(w.removeprefix("/etc/meshplan/") in cm["data"] for w in referenced)


def test_elastic_pytorchjob_leaves_rendezvous_to_the_operator() -> None:
    docs = manifests(PLAN, Deployment(nodes=2, elastic=True, max_restarts=2), "meshplan",
                     "pytorchjob.yaml")  # fmt: skip
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    policy = job["spec"]["elasticPolicy"]
    assert policy == {"rdzvBackend": "c10d", "rdzvPort": 29500, "minReplicas": 2,
                      "maxReplicas": 2, "maxRestarts": 2}  # fmt: skip
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    # what the operator sets for an elastic job
    args = _torchrun_args(container["command"], PET_NNODES="2:2", PET_RDZV_BACKEND="c10d",
                          PET_RDZV_ENDPOINT="meshplan-master-0:29500")  # fmt: skip
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend) == ("2:2", "8", "c10d")


def test_trainjob_carries_what_trainer_v2_requires() -> None:
    docs = manifests(PLAN, Deployment(nodes=2), "meshplan", "trainjob.yaml")
    (job,) = [d for d in docs if d["kind"] == "TrainJob"]
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["spec"]["runtimeRef"] == {"name": "torch-distributed"}
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 8}}
    # the torch-distributed runtime sets these PET_* variables
    args = _torchrun_args(trainer["command"], PET_NNODES="2", PET_NPROC_PER_NODE="8",
                          PET_NODE_RANK="0", PET_MASTER_ADDR="job-node-0-0.job",
                          PET_MASTER_PORT="29400")  # fmt: skip
    assert (args.nnodes, args.nproc_per_node) == ("2", "8")
    assert args.training_script_args[:2] == ["--plan", "/etc/meshplan/plan.json"]
    assert {e["name"] for e in trainer["env"]} >= {"OMP_NUM_THREADS"}
    (override,) = job["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    (volume,) = override["spec"]["volumes"]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    assert "plan.json" in config["data"]
    (container,) = override["spec"]["containers"]
    assert container["volumeMounts"][0]["mountPath"] == "/etc/meshplan"


def test_single_node_pytorchjob_has_no_workers() -> None:
    docs = manifests(make_plan(tp=8, gbs=8), Deployment(), "meshplan", "pytorchjob.yaml")
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_names_must_be_dns_labels() -> None:
    with pytest.raises(ValidationError, match="DNS-1123"):
        Deployment(job_name="Bad_Name")


def test_a_cpu_plan_asks_slurm_for_cores_not_gpus() -> None:
    """The catalog's "CPU" device runs on gloo: a GPU request would make sbatch refuse the job
    on a cluster without GPUs (the dev cluster)."""
    plan = make_plan(tp=1, pp=2, dp=1, gbs=8).model_copy(update={"gpu": "CPU"})
    script = render(plan, Deployment(), target="slurm", framework="meshplan").file("job.sbatch")
    directives = dict(
        line.removeprefix("#SBATCH --").split("=", 1)
        for line in script.content.splitlines()
        if line.startswith("#SBATCH --")
    )
    assert "gpus-per-node" not in directives
    assert directives["cpus-per-task"] == "2"  # the node's two processes
    explicit = Deployment(cpus_per_task=6)
    script = render(plan, explicit, target="slurm", framework="meshplan").file("job.sbatch")
    assert "#SBATCH --cpus-per-task=6" in script.content
