"""The RunReport of a run (written to a file or posted to the service) and gradient dumps."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from planner.plan import Plan
from planner.runreport import RunReport, StageMeasurement
from profiler.runner.split import canonical_name

__all__ = ["RankResult", "build_report", "dump_grads", "post_report", "write_report"]


@dataclass(frozen=True)
class RankResult:
    """What one rank measured (gathered on rank 0)."""

    rank: int
    pp_rank: int
    dp_rank: int
    tp_rank: int
    busy_s: tuple[float, ...]  # per measured step
    busy_cpu_s: tuple[float, ...]  # CPU: thread CPU time of the same calls, per step
    stage_activation_bytes: dict[int, int]  # peak per local stage
    activation_bytes: int  # peak of the rank (all its stages at once)
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    cuda_peak_bytes: int | None
    losses: tuple[float, ...]  # mean loss per measured step (last stage only)


def build_report(
    plan: Plan,
    results: list[RankResult],
    *,
    step_times_s: list[float],
    pipeline_times_s: list[float],
    warmup: int,
    device: str,
    backend: str,
    plan_id: str | None,
    started_at: str,
    notes: dict[str, str],
) -> RunReport:
    """Measured step time (median), bubble, and per-stage busy time and memory.

    A pipeline rank's busy time is the median over steps of its compute time, averaged over
    its dp x tp replicas. The bubble is the simulator's: idle time of the pipeline ranks over
    pp x the schedule's makespan (`pipeline_s`: common start to the last rank leaving the
    schedule's `step`, without the gradient sync and optimizer step that follow):
    bubble = 1 - sum busy / (pp * pipeline_s). The step time includes everything.
    """
    step_s = statistics.median(step_times_s)
    pipeline_s = statistics.median(pipeline_times_s)
    busy: dict[int, float] = {}
    for r in range(plan.pp):
        mine = [statistics.median(x.busy_s) for x in results if x.pp_rank == r]
        busy[r] = sum(mine) / len(mine)
    bubble = min(1.0, max(0.0, 1.0 - sum(busy.values()) / (plan.pp * pipeline_s)))
    notes = {**notes, "pipeline_s": f"{pipeline_s:.6g}"}
    if all(x.busy_cpu_s for x in results):
        # per pipeline rank: median CPU seconds of its compute calls per step (CPU runs)
        cpu = []
        for r in range(plan.pp):
            mine = [statistics.median(x.busy_cpu_s) for x in results if x.pp_rank == r]
            cpu.append(f"{sum(mine) / len(mine):.6g}")
        notes["busy_cpu_s"] = ",".join(cpu)
    stages: list[StageMeasurement] = []
    for s in range(plan.pp * plan.vpp):
        holders = [x for x in results if s in x.stage_activation_bytes]
        rank = holders[0].pp_rank
        act = max(x.stage_activation_bytes[s] for x in holders)
        peak = max(_peak_bytes(x) for x in holders)
        stages.append(
            StageMeasurement(
                stage=s,
                rank=rank,
                busy_s=busy[rank],
                peak_memory_bytes=float(peak),
                activation_bytes=float(act),
            )
        )
    losses = [v for x in results for v in x.losses]
    return RunReport(
        plan_id=plan_id,
        device=device,
        backend=backend,
        world_size=plan.world_size,
        tp=plan.tp,
        pp=plan.pp,
        dp=plan.dp,
        vpp=plan.vpp,
        schedule=plan.schedule,
        steps=len(step_times_s),
        warmup_steps=warmup,
        step_times_s=tuple(step_times_s),
        step_time_s=step_s,
        bubble_fraction=bubble,
        stages=tuple(stages),
        loss=statistics.mean(losses) if losses else None,
        torch_version=torch.__version__,
        started_at=started_at,
        notes=notes,
    )


def _peak_bytes(x: RankResult) -> int:
    """CUDA: the allocator's peak. CPU: peak saved activations + params + grads + optimizer."""
    if x.cuda_peak_bytes is not None:
        return x.cuda_peak_bytes
    return x.activation_bytes + x.params_bytes + x.grads_bytes + x.optimizer_bytes


def write_report(report: RunReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.model_dump_json(indent=2) + "\n")


def post_report(report: RunReport, *, url: str, api_key: str, plan_id: str) -> str:
    """POST the report to `{url}/v1/plans/{plan_id}/runs`; returns the response body."""
    response = httpx.post(
        f"{url}/v1/plans/{plan_id}/runs",
        content=report.model_dump_json(),
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        timeout=30.0,
    )
    if response.status_code >= 400:
        raise RuntimeError(
            f"POST {url}/v1/plans/{plan_id}/runs answered {response.status_code}: "
            f"{response.text[:500]}"
        )
    return response.text


def full_grads(modules: list[nn.Module]) -> dict[str, torch.Tensor]:
    """Every gradient of these modules by its reference-model name, gathered whole (DTensor)."""
    out: dict[str, torch.Tensor] = {}
    for module in modules:
        for name, p in module.named_parameters():
            if p.grad is None:
                continue
            g = p.grad
            full = g.full_tensor() if isinstance(g, DTensor) else g
            out[canonical_name(name)] = full.detach().float().cpu().clone()
    return out


def dump_grads(grads: dict[str, torch.Tensor], directory: Path, *, rank: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(grads, directory / f"grads_rank{rank}.pt")
