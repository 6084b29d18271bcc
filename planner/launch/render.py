"""The public entry: `render(plan, deployment, target=..., framework=...)`, `unsupported(...)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from planner.errors import SpecError, UnsupportedPlanError
from planner.launch.deployment import Deployment, LaunchBundle
from planner.launch.frameworks import deepspeed, megatron, meshplan, torchtitan
from planner.launch.kubernetes import render_kubernetes
from planner.launch.layers import LaunchView, view
from planner.launch.slurm import render_slurm
from planner.launch.torchrun import render_torchrun
from planner.launch.trainer import Trainer
from planner.plan import Plan
from planner.specs.base import Framework
from planner.specs.model import ModelArch
from planner.specs.request import Candidate

Target = Literal["torchrun", "slurm", "kubernetes"]
TARGETS: tuple[Target, ...] = ("torchrun", "slurm", "kubernetes")
FRAMEWORKS: tuple[Framework, ...] = ("meshplan", "megatron", "torchtitan", "deepspeed")

_Check = Callable[[LaunchView], list[str]]


class _Build(Protocol):
    def __call__(self, plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer: ...


_CHECKS: dict[str, _Check] = {
    "meshplan": meshplan.unsupported,
    "megatron": megatron.unsupported,
    "torchtitan": torchtitan.unsupported,
    "deepspeed": deepspeed.unsupported,
}
_BUILDS: dict[str, _Build] = {
    "meshplan": meshplan.trainer,
    "megatron": megatron.trainer,
    "torchtitan": torchtitan.trainer,
    "deepspeed": deepspeed.trainer,
}


def unsupported(
    plan_or_candidate: Plan | Candidate,
    framework: Framework,
    *,
    arch: ModelArch | None = None,
    global_batch_size: int | None = None,
    seq_length: int | None = None,
) -> list[str]:
    """Why `framework` cannot run this plan or candidate, precisely; empty when it can.

    A Candidate may leave its stage split open (`stages=None`); then only what it fixes is
    checked. Pass the model's `arch` and the `global_batch_size` when known: some rules need them.
    """
    if framework not in _CHECKS:
        raise SpecError("framework", framework, f"choose one of {list(FRAMEWORKS)}")
    v = view(
        plan_or_candidate, arch=arch, global_batch_size=global_batch_size, seq_length=seq_length
    )
    reasons = []
    if framework == "megatron" and isinstance(plan_or_candidate, Plan) and v.arch is None:
        reasons.append(
            "the plan carries no model shapes (arch): Megatron needs --num-layers, "
            "--hidden-size, --num-attention-heads and --ffn-hidden-size"
        )
    return reasons + view_unsupported(v, framework)


def view_unsupported(v: LaunchView, framework: Framework) -> list[str]:
    """The framework's own check of a launch view: what `unsupported` runs once it has built
    the view (the search builds views of its configurations directly)."""
    return _CHECKS[framework](v)


def render(
    plan: Plan,
    deployment: Deployment,
    *,
    target: Target,
    framework: Framework,
) -> LaunchBundle:
    """Launch files, per-node commands and notes that run `plan` with `framework` on `target`.

    Raises UnsupportedPlanError (with every reason) when the framework cannot express the plan,
    and SpecError when the deployment does not fit it (e.g. nodes that do not divide num_gpus).
    """
    if target not in TARGETS:
        raise SpecError("target", target, f"choose one of {list(TARGETS)}")
    reasons = unsupported(plan, framework)
    if reasons:
        raise UnsupportedPlanError(framework, reasons)
    header = _header(plan, framework)
    trainer = _BUILDS[framework](plan, deployment, config_dir=_config_dir(target))
    if target == "torchrun":
        return render_torchrun(plan, deployment, trainer, header)
    if target == "slurm":
        return render_slurm(plan, deployment, trainer, header)
    return render_kubernetes(plan, deployment, trainer, header)


def _config_dir(target: Target) -> str:
    return "/etc/meshplan/" if target == "kubernetes" else ""


def _header(plan: Plan, framework: Framework) -> str:
    return (
        f"# meshplan launch: {plan.model_name} on {plan.num_gpus} x {plan.gpu}, "
        f"framework {framework}\n"
        f"# tp={plan.tp} pp={plan.pp} dp={plan.dp} vpp={plan.vpp} schedule={plan.schedule} "
        f"mbs={plan.micro_batch_size} m={plan.num_microbatches} "
        f"global_batch={plan.global_batch_size} zero={plan.zero_stage}" + _folded(plan)
    )


def _folded(plan: Plan) -> str:
    """The context and expert degrees, when the plan uses them (docs/moe.md)."""
    parts = [f"cp={plan.cp} ({plan.cp_comm})"] if plan.cp > 1 else []
    if plan.ep > 1 or plan.etp > 1:
        parts.append(f"ep={plan.ep} etp={plan.etp} edp={plan.edp}")
    return (" " + " ".join(parts)) if parts else ""
