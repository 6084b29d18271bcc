"""Slurm target: an sbatch script that runs one `srun torchrun` task per node.

The head node (rendezvous host) is the first of `scontrol show hostnames "$SLURM_JOB_NODELIST"`;
the rendezvous id is the job id, so a requeued job never joins a stale rendezvous.
With a container image the srun line uses pyxis/enroot (`--container-image`). A plan for the
catalog's "CPU" device (the reference runner on gloo) asks for no GPUs: its processes are CPU
cores (`--cpus-per-task`, one per process unless the deployment says otherwise).
"""

from __future__ import annotations

from planner.launch.common import (
    environment,
    layout,
    option_lines,
    shell_join,
    torchrun_options,
    workdir,
)
from planner.launch.deployment import Deployment, LaunchBundle, LaunchFile
from planner.launch.trainer import Trainer
from planner.plan import Plan

SCRIPT = "job.sbatch"
CPU_DEVICE = "CPU"  # planner.catalog.hardware's stand-in "GPU" for CPU runs


def render_slurm(plan: Plan, dep: Deployment, trainer: Trainer, header: str) -> LaunchBundle:
    lay = layout(plan, dep)
    env = environment(dep, trainer)
    wd = workdir(dep, container=False)
    directives = [
        ("job-name", dep.job_name),
        ("nodes", str(lay.nodes)),
        ("ntasks-per-node", "1"),
    ]
    if plan.gpu != CPU_DEVICE:
        directives.append(("gpus-per-node", str(lay.gpus_per_node)))
    directives += [("time", dep.time), ("output", dep.output), ("error", dep.error)]
    cpus = dep.cpus_per_task or (lay.gpus_per_node if plan.gpu == CPU_DEVICE else None)
    if cpus is not None:
        directives.append(("cpus-per-task", str(cpus)))
    if dep.partition:
        directives.append(("partition", dep.partition))
    if dep.account:
        directives.append(("account", dep.account))
    if lay.hosts:
        directives.append(("nodelist", ",".join(lay.hosts)))
    opts = torchrun_options(
        nnodes=str(lay.nodes),
        nproc_per_node=str(lay.gpus_per_node),
        endpoint=f'"$HEAD_NODE:{dep.port}"',
        rdzv_id='"$SLURM_JOB_ID"',
        max_restarts=dep.max_restarts,
    )
    srun = ["srun", "--nodes", str(lay.nodes), "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
    if dep.image:
        srun += [
            f"--container-image={dep.image}",
            "--container-mounts",
            '"$PWD:$PWD"',
            "--container-workdir",
            '"$PWD"',
        ]
    words = [*srun, "torchrun", *opts, *trainer.argv]
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH --{k}={v}" for k, v in directives),
        *header.splitlines(),
        f"# Submit from {wd}: sbatch {SCRIPT}",
        "set -eu",
        "# head -n1 closes the pipe early: no pipefail until the head node is known",
        'HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"',
        "export HEAD_NODE",
        "set -o pipefail",
        *(f"export {k}={shell_join([v])}" for k, v in env),
        f"cd {shell_join([wd])}",
        "",
        " \\\n    ".join(option_lines(words)),
        "",
    ]
    notes = [*trainer.notes, f"submit with `sbatch {SCRIPT}` from {wd} (config files there too)"]
    if dep.image:
        notes.append(
            "the container runs through pyxis/enroot (srun --container-image), with the "
            "working directory mounted at the same path"
        )
    files = (LaunchFile(name=SCRIPT, content="\n".join(lines), mode=0o755), *trainer.files)
    return LaunchBundle(files=files, commands=(f"sbatch {SCRIPT}",), notes=tuple(notes))
