"""torchrun target: one command per node (the same on every node) and a `launch.sh` that runs it.

The c10d rendezvous gives each node its rank, so no command names one."""

from __future__ import annotations

from planner.launch.common import (
    environment,
    layout,
    option_lines,
    rdzv_id,
    shell_join,
    torchrun_options,
    workdir,
)
from planner.launch.deployment import Deployment, LaunchBundle, LaunchFile
from planner.launch.trainer import Trainer
from planner.plan import Plan

SCRIPT = "launch.sh"


def render_torchrun(plan: Plan, dep: Deployment, trainer: Trainer, header: str) -> LaunchBundle:
    lay = layout(plan, dep)
    head = lay.hosts[0] if lay.hosts else ("localhost" if lay.nodes == 1 else None)
    endpoint = f"{head}:{dep.port}" if head else f'"$HEAD_NODE:{dep.port}"'
    env = environment(dep, trainer)
    rid = rdzv_id(plan, dep)

    def command(endpoint: str) -> list[str]:
        opts = torchrun_options(
            nnodes=str(lay.nodes),
            nproc_per_node=str(lay.gpus_per_node),
            endpoint=endpoint,
            rdzv_id=rid,
            max_restarts=dep.max_restarts,
        )
        return ["torchrun", *opts, *trainer.argv]

    env_prefix = [f"{k}={v}" for k, v in env]
    commands = [shell_join([*env_prefix, *command(endpoint)])] * lay.nodes

    wd = workdir(dep, container=False)
    script_head = head or ""
    lines = [
        "#!/usr/bin/env bash",
        *header.splitlines(),
        f"# Run once on each of the {lay.nodes} node(s), from {wd}: bash {SCRIPT}",
    ]
    if lay.hosts:
        lines += [f"#   node {i}: {h}" for i, h in enumerate(lay.hosts)]
    lines += [
        "set -euo pipefail",
        f'HEAD_NODE="${{HEAD_NODE:-{script_head}}}"'
        if script_head
        else 'HEAD_NODE="${HEAD_NODE:?set HEAD_NODE to the host name of node 0}"',
        f"cd {shell_join([wd])}",
        *(f"export {k}={shell_join([v])}" for k, v in env),
    ]
    argv = command(f'"$HEAD_NODE:{dep.port}"')
    lines += ["exec " + " \\\n    ".join(option_lines(argv)), ""]
    notes = list(trainer.notes)
    if lay.hosts:
        notes.append("run commands[i] on hosts[i] (" + ", ".join(lay.hosts) + f"), from {wd}")
    elif lay.nodes > 1:
        notes.append(
            f"run commands[i] on node i, from {wd}, with HEAD_NODE set to the host name of node 0"
        )
    else:
        notes.append(f"run the command from {wd}")
    if dep.image:
        notes.append(f"the torchrun target ignores image={dep.image}; use slurm or kubernetes")
    files = (
        LaunchFile(name=SCRIPT, content="\n".join(lines), mode=0o755),
        *trainer.files,
    )
    return LaunchBundle(files=files, commands=tuple(commands), notes=tuple(notes))
