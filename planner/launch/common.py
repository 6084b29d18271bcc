"""What every launch target shares: node layout, environment and torchrun's options."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from planner.errors import SpecError
from planner.launch.deployment import Deployment
from planner.launch.trainer import Trainer
from planner.plan import Plan

DEFAULT_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Layout:
    nodes: int
    gpus_per_node: int
    hosts: tuple[str, ...]  # empty when not known


def layout(plan: Plan, dep: Deployment) -> Layout:
    """Nodes x GPUs per node for the plan's `num_gpus`; errors name the field and the numbers."""
    n = plan.num_gpus
    if plan.world_size != n:
        names, values = ("tp*pp*dp", f"{plan.tp}*{plan.pp}*{plan.dp}")
        if plan.cp > 1:  # stored messages of cp = 1 plans keep their wording
            names, values = names + "*cp", values + f"*{plan.cp}"
        raise SpecError("plan.num_gpus", n, f"{names} = {values} = {plan.world_size} differs")
    if dep.hosts and dep.nodes is not None and len(dep.hosts) != dep.nodes:
        raise SpecError(
            "deployment.hosts",
            list(dep.hosts),
            f"{len(dep.hosts)} hosts for nodes={dep.nodes} (plan num_gpus={n})",
        )
    nodes = dep.nodes or (len(dep.hosts) if dep.hosts else None)
    g = dep.gpus_per_node
    if nodes is None:
        if g is None:
            g = DEFAULT_GPUS_PER_NODE if n % DEFAULT_GPUS_PER_NODE == 0 else n
        if n % g:
            raise SpecError(
                "deployment.gpus_per_node", g, f"does not divide the plan's num_gpus={n}"
            )
        nodes = n // g
    elif g is None:
        if n % nodes:
            raise SpecError("deployment.nodes", nodes, f"does not divide the plan's num_gpus={n}")
        g = n // nodes
    if nodes * g != n:
        raise SpecError(
            "deployment.gpus_per_node",
            g,
            f"nodes*gpus_per_node = {nodes}*{g} = {nodes * g} differs from the plan's num_gpus={n}",
        )
    if dep.hosts and len(dep.hosts) != nodes:
        raise SpecError(
            "deployment.hosts",
            list(dep.hosts),
            f"{len(dep.hosts)} hosts for {nodes} nodes (plan num_gpus={n})",
        )
    return Layout(nodes=nodes, gpus_per_node=g, hosts=dep.hosts)


def rdzv_id(plan: Plan, dep: Deployment) -> str:
    return dep.rdzv_id or f"meshplan-{plan.model_hash[:12]}"


def environment(dep: Deployment, trainer: Trainer) -> tuple[tuple[str, str], ...]:
    """OMP threads, the trainer's needs, NCCL settings asked for, then the user's (they win)."""
    env: dict[str, str] = {"OMP_NUM_THREADS": str(dep.omp_num_threads)}
    env.update(dict(trainer.env))
    if dep.nccl_debug:
        env["NCCL_DEBUG"] = dep.nccl_debug
    if dep.nccl_socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = dep.nccl_socket_ifname
    if dep.nccl_ib_hca:
        env["NCCL_IB_HCA"] = dep.nccl_ib_hca
    env.update(dep.env)
    return tuple(env.items())


def torchrun_options(
    *,
    nnodes: str,
    nproc_per_node: str,
    endpoint: str,
    rdzv_id: str,
    max_restarts: int,
) -> list[str]:
    """torchrun's options for a c10d rendezvous (REFERENCE.md, Launch conventions).

    No --node-rank: the c10d rendezvous assigns node ranks itself, and torchrun warns that a
    given node_rank is ignored (torch/distributed/run.py).
    """
    return [
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        nproc_per_node,
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        rdzv_id,
        "--max-restarts",
        str(max_restarts),
    ]


def shell_join(words: list[str] | tuple[str, ...]) -> str:
    """Quote words for a POSIX shell, leaving `"$VAR"`-style references expandable."""
    return " ".join(w if _is_shell_ref(w) else shlex.quote(w) for w in words)


def _is_shell_ref(word: str) -> bool:
    return word.startswith('"$') and word.endswith('"') and word.count('"') == 2


def workdir(dep: Deployment, *, container: bool) -> str:
    if dep.workdir:
        return dep.workdir
    return "/workspace" if container else "."


def option_lines(words: list[str]) -> list[str]:
    """Shell words grouped one option (with its value) per line, for readable scripts."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        pair = (w.startswith("--") and "=" not in w) or w == "-m"
        if pair and i + 1 < len(words) and not words[i + 1].startswith("-"):
            out.append(shell_join([w, words[i + 1]]))
            i += 2
        else:
            out.append(shell_join([w]))
            i += 1
    return out
