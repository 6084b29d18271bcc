"""DDP (ZeRO 0, dp > 1, tp = 1) under torch's pipelining: the shapes where a stage runs two
or more backwards with no forward of that stage between them in the first step (GPipe at
m > 1, also pp = 1; 1F1B with m <= pp; interleaved 1F1B) train two steps with the gradients
of one process (docs/runner.md, "Data parallel under the pipeline schedules").

Real runs: the runner in 2 or 4 gloo processes, `--optimizer sgd`, gradients of both steps
compared with one process replaying the same steps (rtol=1e-4, atol=1e-5).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_plan_support import assert_same_grads, make_plan, run_forked

from planner.specs.base import ScheduleName
from planner.specs.model import ModelArch

pytestmark = pytest.mark.slow

# the model: GPT, 8 layers, hidden 128 (vocabulary and sequence kept small)
GPT8 = ModelArch(
    family="gpt", name="gpt8-h128", num_layers=8, hidden_size=128, num_attention_heads=4,
    vocab_size=128,
)  # fmt: skip


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
