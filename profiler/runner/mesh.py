"""The process group and the ("pp", "dp", "tp") DeviceMesh of a run, ("pp", "dp", "cp", "tp")
with context parallelism.

Ranks are laid out pp-major, tp innermost: global rank = ((pp_rank * dp + dp_rank) * cp +
cp_rank) * tp + tp_rank, so a tensor-parallel group is consecutive ranks (one node), and a cp
group the next level out, as Megatron's default order tp-cp-ep-dp-pp does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from planner.plan import Plan

__all__ = ["RunMesh", "init_mesh"]

AXES = ("pp", "dp", "tp")


@dataclass(frozen=True)
class RunMesh:
    mesh: DeviceMesh
    device: torch.device
    backend: str
    rank: int
    world_size: int
    pp: int
    dp: int
    tp: int
    pp_rank: int
    dp_rank: int
    tp_rank: int
    cp: int = 1
    cp_rank: int = 0

    @property
    def cp_group(self) -> dist.ProcessGroup:
        return self.mesh["cp"].get_group()

    @property
    def pp_group(self) -> dist.ProcessGroup:
        return self.mesh["pp"].get_group()

    @property
    def dp_group(self) -> dist.ProcessGroup:
        return self.mesh["dp"].get_group()

    @property
    def tp_mesh(self) -> DeviceMesh:
        return self.mesh["tp"]

    @property
    def dp_mesh(self) -> DeviceMesh:
        return self.mesh["dp"]


def init_mesh(plan: Plan, *, device: str | None) -> RunMesh:
    """Join the process group torchrun set up and build the mesh; the world must be
    pp*dp*cp*tp."""
    kind = device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = "nccl" if kind == "cuda" else "gloo"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    need = plan.world_size
    if world != need:
        cp = f"cp({plan.cp}) * " if plan.cp > 1 else ""
        raise ValueError(
            f"WORLD_SIZE={world} but the plan needs pp({plan.pp}) * dp({plan.dp}) * {cp}"
            f"tp({plan.tp}) = {need} processes; run torchrun with --nnodes x --nproc-per-node "
            f"= {need}"
        )
    if kind == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, device_id=dev if kind == "cuda" else None)
    shape: tuple[int, ...] = (plan.pp, plan.dp, plan.tp)
    axes: tuple[str, ...] = AXES
    if plan.cp > 1:
        shape, axes = (plan.pp, plan.dp, plan.cp, plan.tp), ("pp", "dp", "cp", "tp")
    mesh = init_device_mesh(kind, shape, mesh_dim_names=axes)
    return RunMesh(
        mesh=mesh,
        device=dev,
        backend=backend,
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        pp=plan.pp,
        dp=plan.dp,
        tp=plan.tp,
        pp_rank=mesh["pp"].get_local_rank(),
        dp_rank=mesh["dp"].get_local_rank(),
        tp_rank=mesh["tp"].get_local_rank(),
        cp=plan.cp,
        cp_rank=mesh["cp"].get_local_rank() if plan.cp > 1 else 0,
    )
