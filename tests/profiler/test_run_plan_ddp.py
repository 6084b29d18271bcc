"""DDP (ZeRO 0, dp > 1, tp = 1) under torch's pipelining: the shapes where a stage runs two
or more backwards with no forward of that stage between them in the first step (GPipe at
m > 1, also pp = 1; 1F1B with m <= pp; interleaved 1F1B) train two steps with the gradients
of one process (docs/runner.md, "Data parallel under the pipeline schedules").

Real runs: the runner in 2 or 4 gloo processes, `--optimizer sgd`, gradients of both steps
compared with one process replaying the same steps (rtol=1e-4, atol=1e-5). And the protocol
itself, on a one-rank gloo group: `PipelineDDP` under a pipeline schedule all-reduces each
bucket once per step, where plain DDP all-reduces twice in the first step and then fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from run_plan_support import assert_same_grads, make_plan, run_forked
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.nn.parallel import DistributedDataParallel

from planner.specs.base import ScheduleName
from planner.specs.model import ModelArch
from profiler.runner.parallel import PipelineDDP

# the model: GPT, 8 layers, hidden 128 (vocabulary and sequence kept small)
GPT8 = ModelArch(
    family="gpt", name="gpt8-h128", num_layers=8, hidden_size=128, num_attention_heads=4,
    vocab_size=128,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "microbatches"),
    [
        ("interleaved-1f1b", 2, 3, 4),  # the plan of the issue: pp=2 dp=2 vpp=3 m=4 mbs=2
        ("gpipe", 1, 1, 4),  # pp=1 dp=2: one stage, four backwards in a row
        ("gpipe", 2, 1, 4),
        ("1f1b", 2, 1, 2),  # m <= pp: the warm-up forwards, then the backwards in a row
    ],
    ids=["interleaved-pp2-vpp3-m4", "gpipe-pp1-m4", "gpipe-pp2-m4", "1f1b-pp2-m2"],
)
def test_ddp_trains_two_steps_like_one_process(
    tmp_path: Path, schedule: ScheduleName, pp: int, vpp: int, microbatches: int
) -> None:
    plan = make_plan(
        GPT8, pp=pp, dp=2, vpp=vpp, schedule=schedule, micro_batch_size=2,
        microbatches=microbatches,
    )  # fmt: skip
    assert plan.zero_stage == 0 and plan.tp == 1  # DDP's shape
    assert assert_same_grads(plan, run_forked(plan, tmp_path)) == 2


@pytest.fixture
def one_rank() -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _bucket_reductions_per_step(ddp: DistributedDataParallel, steps: int) -> list[int]:
    """Run GPipe (one stage, 4 micro-batches) `steps` times; count DDP's bucket all-reduces
    in each step with a comm hook (which returns the bucket as reduced: one rank)."""
    calls: list[int] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses string annotations
        del state
        calls.append(bucket.index())
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    ddp.register_comm_hook(None, hook)
    stage = PipelineStage(ddp, 0, 1, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, 4, loss_fn=lambda out, target: out.sum())
    per_step: list[int] = []
    for _ in range(steps):
        before = len(calls)
        schedule.step(torch.randn(8, 4), target=torch.zeros(8, 1))
        per_step.append(len(calls) - before)
    return per_step


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))  # one bucket


def test_pipeline_ddp_reduces_each_bucket_once_per_step(one_rank: None) -> None:
    assert _bucket_reductions_per_step(PipelineDDP(_model()), steps=3) == [1, 1, 1]


def test_plain_ddp_under_a_schedule_reduces_twice_then_fails(one_rank: None) -> None:
    """What PipelineDDP is for (torch 2.13): the metadata forward arms plain DDP, so step 0
    reduces the bucket twice and step 1's forward fails DDP's bucket-rebuild check."""
    ddp = DistributedDataParallel(_model())
    with pytest.raises(RuntimeError, match="failed to run forward") as info:
        _bucket_reductions_per_step(ddp, steps=2)
    assert "rebuilt params size" in repr(info.value.__cause__)
