"""The fixed cost of one pipeline action in torch.distributed.pipelining, on this device.

A pipeline runtime does work of its own around every action besides the layers' compute:
`PipelineStage.forward_one_chunk` fetches the received activations and marks them as
requiring grad, flattens arguments, caches the output and inputs for the backward;
`backward_one_chunk` pops the cache, runs `stage_backward` (autograd plus the bookkeeping
of the input gradients to send) or, split, `stage_backward_input` (which also walks the
graph for the weight step) and `backward_weight_one_chunk` the weight step. A layer-by-layer
profile does not see it; the cost model adds it per action (`ModelProfile.action_overhead_s`,
planner.cost.partition).

Measured, not assumed: in this process (a gloo process group of one rank, created here when
none exists: no message is ever sent), a `PipelineStage` of a near-zero-cost module (one
parameter, `x * w`) is prepared as a schedule prepares it (static metadata, the stage's
forward and backward infrastructure) and its entry points are called directly, chunk after
chunk, as a schedule calls them; the same module is called directly in the same rounds,
through the same functions the profiler times a layer's actions with (forward;
`torch.autograd.backward` for B; torch's `stage_backward_input` and `stage_backward_weight`
for a split backward's I and W, as `profiler.layer_profiler` times `split_bw_input_s` and
`split_bw_weight_s`), so that what the layers' times already hold is not counted twice.
Per action kind, overhead = median(stage call) - median(direct call), with
    F = forward_one_chunk - module(x)
    B = backward_one_chunk(full_backward=True) - autograd.backward(out)
    I = backward_one_chunk(full_backward=False) - stage_backward_input(out, x)
    W = backward_weight_one_chunk - stage_backward_weight(groups)
(a first stage: I - 0 and W - autograd.backward(out): its I does nothing and its W runs the
full backward), each clamped at 0. It is measured for a first stage (no activations
received; the input does not require grad, like token ids), a middle stage and a last stage
(whose backward starts from the loss), and the profile stores the mean of the three: a
plan's stages are first, middle or last, and the cost model has one overhead per action
kind. The keyword
argument `labels` is passed to every stage, as the runner (profiler.run_plan) does.

Uses PipelineStage's preparation methods (`_prepare_forward_infra`, `_prepare_backward_infra`,
`_inference_mode`), which are private: a torch that lacks them gives `None` and a note.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from planner.specs.model import ActionOverhead
from profiler.timing import synchronize

__all__ = ["POSITIONS", "PositionOverhead", "measure_action_overhead", "note"]

POSITIONS = ("first", "middle", "last")
_NUM_STAGES = 3


class _Tiny(nn.Module):
    """A near-zero-cost stage: one parameter, one multiply (a loss on the last stage)."""

    def __init__(self, *, last: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))
        self.last = last

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        del labels
        y = x * self.w
        return y.sum() if self.last else y


@dataclass(frozen=True)
class PositionOverhead:
    """Per action kind, seconds: median stage call, median direct call, and their difference."""

    position: str
    stage_s: dict[str, float]
    direct_s: dict[str, float]

    @property
    def overhead(self) -> ActionOverhead:
        d, s = self.direct_s, self.stage_s
        return ActionOverhead(
            f_s=max(0.0, s["F"] - d["F"]),
            b_s=max(0.0, s["B"] - d["B"]),
            i_s=max(0.0, s["I"] - d["I"]),
            w_s=max(0.0, s["W"] - d["W"]),
        )


def _timed(device: torch.device, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """(result, seconds) of one call: perf_counter between synchronisations (host time is what
    is measured; on CUDA this module's kernels are a few microseconds)."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    synchronize(device)
    return out, time.perf_counter() - t0


def _split_input(
    y: torch.Tensor, grads: list[torch.Tensor] | None, x: torch.Tensor, module: nn.Module
) -> list[dict[str, Any]]:
    _, groups = stage_backward_input([y], grads, [x], module.parameters())
    return groups


def _stage(
    position: str, device: torch.device, dtype: torch.dtype, chunks: int, group: Any
) -> tuple[Any, _Tiny, torch.Tensor, dict[str, torch.Tensor]]:
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.stage import InferenceMode  # type: ignore[attr-defined]

    index = POSITIONS.index(position)
    first, last = index == 0, index == _NUM_STAGES - 1
    module = _Tiny(last=last).to(device=device, dtype=dtype)
    x = torch.ones(2, 4, device=device, dtype=dtype)
    example_in = x if first else x.clone().requires_grad_(True)
    example_out = module(example_in).detach().requires_grad_(True)
    labels = torch.zeros(2, 4, device=device, dtype=torch.long)
    stage = PipelineStage(
        module,
        index,
        _NUM_STAGES,
        device,
        input_args=(example_in,),
        output_args=(example_out,),
        group=group,
    )
    stage._inference_mode = InferenceMode.STATIC
    stage.has_backward = True
    stage._prepare_forward_infra(chunks, (x,), {"labels": labels}, has_backward=True)
    stage._prepare_backward_infra(chunks)
    with torch.no_grad():
        for k in range(chunks):
            for info in (*stage.args_recv_info[k], *stage.grad_recv_info.get(k, ())):
                if getattr(info, "buffer", None) is not None:
                    info.buffer.fill_(1.0)
    return stage, module, x, {"labels": labels}


def _measure_position(
    position: str,
    *,
    device: torch.device,
    dtype: torch.dtype,
    rounds: int,
    warmup: int,
    chunks: int,
    group: Any,
) -> PositionOverhead:
    samples: dict[str, list[float]] = {k: [] for k in ("F", "B", "I", "W")}
    direct: dict[str, list[float]] = {k: [] for k in ("F", "B", "I", "W")}
    first = position == "first"
    for split in (False, True):
        stage, module, x, kwargs = _stage(position, device, dtype, chunks, group)
        args = (x,) if first else ()
        for r in range(warmup + rounds):
            keep = r >= warmup
            stage.clear_runtime_states()
            for k in range(chunks):
                out, t_f = _timed(device, stage.forward_one_chunk, k, args, kwargs)
                loss = out if stage.is_last else None
                _, t_b = _timed(
                    device, stage.backward_one_chunk, k, loss=loss, full_backward=not split
                )
                t_w = _timed(device, stage.backward_weight_one_chunk, k)[1] if split else 0.0
                # the same module called directly, on a fresh input like the stage's
                xi = x if first else x.clone().requires_grad_(True)
                y, d_f = _timed(device, module, xi, **kwargs)
                grad = None if y.dim() == 0 else torch.ones_like(y)
                d_i = d_b = d_w = 0.0
                if split and not first:
                    # what the profile's split I and W time on a layer (layer_profiler)
                    groups, d_i = _timed(
                        device, _split_input, y, None if grad is None else [grad], xi, module
                    )
                    _, d_w = _timed(device, stage_backward_weight, module.parameters(), groups)
                else:
                    # B; and a first stage's W, which runs the full backward (its input has
                    # no gradient to take: its I does nothing, the profile's split I is 0)
                    _, d_b = _timed(device, torch.autograd.backward, y, grad)
                    d_w = d_b
                if not keep:
                    continue
                samples["F"].append(t_f)
                direct["F"].append(d_f)
                if split:
                    samples["I"].append(t_b)
                    samples["W"].append(t_w)
                    direct["I"].append(d_i)
                    direct["W"].append(d_w)
                else:
                    samples["B"].append(t_b)
                    direct["B"].append(d_b)
            for p in module.parameters():
                p.grad = None
    return PositionOverhead(
        position=position,
        stage_s={k: statistics.median(v) for k, v in samples.items()},
        direct_s={k: statistics.median(v) for k, v in direct.items()},
    )


def measure_action_overhead(
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    rounds: int = 30,
    warmup: int = 3,
    chunks: int = 8,
) -> tuple[ActionOverhead, tuple[PositionOverhead, ...]]:
    """The mean over stage positions (first, middle, last) of the per-action overhead, and
    each position's measurement (module docstring). Raises RuntimeError when this torch's
    PipelineStage cannot be prepared this way."""
    dev = torch.device(device)
    created = False
    if not dist.is_initialized():
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        created = True
    try:
        group = dist.group.WORLD
        if dist.get_world_size(group) > _NUM_STAGES:
            raise RuntimeError(
                f"a process group of {dist.get_world_size(group)} ranks is already initialised; "
                f"measure the action overhead in a process of its own"
            )
        with torch.random.fork_rng(devices=[]):
            per = tuple(
                _measure_position(
                    p,
                    device=dev,
                    dtype=dtype,
                    rounds=rounds,
                    warmup=warmup,
                    chunks=chunks,
                    group=group,
                )
                for p in POSITIONS
            )
    except (AttributeError, TypeError) as e:  # a torch whose private preparation differs
        raise RuntimeError(f"cannot prepare a PipelineStage to time its actions: {e}") from e
    finally:
        if created:
            dist.destroy_process_group()
    n = len(per)
    mean = ActionOverhead(
        f_s=sum(p.overhead.f_s for p in per) / n,
        b_s=sum(p.overhead.b_s for p in per) / n,
        i_s=sum(p.overhead.i_s for p in per) / n,
        w_s=sum(p.overhead.w_s for p in per) / n,
    )
    return mean, per


def note(per: tuple[PositionOverhead, ...]) -> str:
    """One line per position: stage call vs direct call, microseconds."""

    def us(x: float) -> str:
        return f"{x * 1e6:.1f}"

    parts = []
    for p in per:
        o = p.overhead
        parts.append(
            f"{p.position}: F {us(p.stage_s['F'])}-{us(p.direct_s['F'])}={us(o.f_s)}, "
            f"B {us(p.stage_s['B'])}-{us(p.direct_s['B'])}={us(o.b_s)}, "
            f"I {us(p.stage_s['I'])}-{us(p.direct_s['I'])}={us(o.i_s)}, "
            f"W {us(p.stage_s['W'])}-{us(p.direct_s['W'])}={us(o.w_s)}"
        )
    return "us, stage call - direct call: " + "; ".join(parts)


if __name__ == "__main__":
    torch.set_num_threads(1)
    mean, per = measure_action_overhead()
    print(mean)
    print(note(per))
