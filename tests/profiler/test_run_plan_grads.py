"""The runner's pipeline split, schedules, tensor/data parallel and recompute give the same
gradients as one process running the plain model on the same global batch.

Real multi-process runs: torchrun with gloo on CPU, fp32. Tolerance rtol=1e-4, atol=1e-5
(fp32 summation order differs between micro-batched, sharded and whole-batch runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_plan_support import assert_same_grads, make_plan, run_forked, user_model

from planner.specs.base import ScheduleName
from planner.specs.request import StageSpec
from profiler.models import tiny_arch

pytestmark = pytest.mark.slow

GPT = tiny_arch("gpt", num_layers=4)  # layers: embedding, decoder.0-3, head (6)
UNEVEN = (StageSpec(layers=(0, 2)), StageSpec(layers=(2, 6)))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pp2_uneven_stages(tmp_path: Path, schedule: ScheduleName) -> None:
    plan = make_plan(GPT, pp=2, schedule=schedule, stages=UNEVEN)
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_pp2_interleaved_vpp2(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=2, vpp=2, schedule="interleaved-1f1b")
    assert len(plan.stages) == 4
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_pp2_dp2_ddp(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=2, dp=2, schedule="1f1b")
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_pp2_tp2(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=2, tp=2, schedule="1f1b")
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_pp2_recompute_per_layer(tmp_path: Path) -> None:
    stages = (
        StageSpec(layers=(0, 3), recompute=("none", "full", "selective")),
        StageSpec(layers=(3, 6), recompute=("selective", "full", "none")),
    )
    plan = make_plan(GPT, pp=2, schedule="1f1b", stages=stages)
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_zbv_v_shape(tmp_path: Path) -> None:
    """Two chunks per rank in a V: rank 0 holds the first and the last stage."""
    plan = make_plan(GPT, pp=2, vpp=2, schedule="zbv")
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_zb_h1_dp2_allreduce(tmp_path: Path) -> None:
    """Split backward (I then W) with data parallel: gradients averaged after the step."""
    plan = make_plan(GPT, pp=2, dp=2, schedule="zb-h1")
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_pp2_tp2_sequence_parallel(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=2, tp=2, schedule="1f1b", sequence_parallel=True)
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_llama_pp2_tp2_uneven(tmp_path: Path) -> None:
    """Llama: grouped-query attention (2 kv heads over tp=2), rotary, SwiGLU, untied head."""
    llama = tiny_arch("llama", num_layers=4)
    stages = (StageSpec(layers=(0, 4)), StageSpec(layers=(4, 6)))
    plan = make_plan(llama, pp=2, tp=2, schedule="gpipe", stages=stages)
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_dp2_zero3_fsdp(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=1, dp=2, schedule="1f1b", zero_stage=3)
    assert_same_grads(plan, run_forked(plan, tmp_path))


def test_user_factory_model(tmp_path: Path) -> None:
    """`--model-factory`: a user's model (3 blocks, no arch in the plan), pp=2, uneven."""
    stages = (StageSpec(layers=(0, 3)), StageSpec(layers=(3, 5)))
    plan = make_plan(tiny_arch("gpt", num_layers=3), pp=2, schedule="1f1b", stages=stages)
    plan = plan.model_copy(update={"arch": None})
    grads = run_forked(plan, tmp_path, "--model-factory", "run_plan_support:user_model")
    model = user_model(seq_length=plan.seq_length, seed=0)
    assert_same_grads(plan, grads, model=model, vocab_size=model.vocab_size)


@pytest.mark.parametrize(
    "bounds", [((0, 1), (1, 6)), ((0, 5), (5, 6))], ids=["embedding-alone", "head-alone"]
)
def test_a_stage_of_only_the_embedding_or_only_the_head(
    tmp_path: Path, bounds: tuple[tuple[int, int], tuple[int, int]]
) -> None:
    stages = tuple(StageSpec(layers=b) for b in bounds)
    plan = make_plan(GPT, pp=2, schedule="1f1b", stages=stages)
    assert_same_grads(plan, run_forked(plan, tmp_path))
