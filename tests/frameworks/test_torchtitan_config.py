"""torchtitan 0.3.0 loads the emitted command line with its own ConfigManager.

`ConfigManager().parse_args(argv)` runs the `--module llama3 --config <function>` registry,
tyro's parser over every option and the subcommand, and Trainer.Config's checks (micro-batch
divides the local batch; no CUDA graphs with pp). Then torchtitan's own ParallelDims (degrees
multiply to the world size) and device mesh on a fake process group, its pipeline metadata
and default split (`_get_pipeline_metadata`, `_generate_llm_fqn_per_model_part`) or the
explicit module names, and its stage-to-rank mapping must reproduce the plan.
"""

from __future__ import annotations

from typing import Any

import pytest
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders
from searched_plans import cases
from torchtitan.config import ConfigManager
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan.distributed.pipeline_parallel import (
    _generate_llm_fqn_per_model_part,
    _get_pipeline_metadata,
    _get_pp_rank_to_stage_indices_mapping,
)
from torchtitan_support import fake_world, titan_argv  # noqa: F401 - the fixture

from planner.launch.layers import view
from planner.plan import Plan

AC = {"selective": SelectiveAC.Config, "full": FullAC.Config}


def plan_fqns(plan: Plan) -> list[list[str]]:
    stages = view(plan).stage_layers()
    assert stages is not None
    out = []
    for s in stages:
        names = ["tok_embeddings"] if s.has_embedding else []
        names += [f"layers.{s.first_decoder + i}" for i in range(s.decoders)]
        out.append(names + (["norm", "lm_head"] if s.has_head else []))
    return out


def check(plan: Plan, start_world: Any) -> None:
    config = ConfigManager().parse_args(titan_argv(plan))
    par, train = config.parallelism, config.training
    model = config.model_spec.model
    assert len(model.layers) == plan.arch.num_layers  # type: ignore[union-attr]
    dims = ParallelDims.from_config(par, plan.num_gpus)
    assert (dims.tp, dims.pp, dims.dp_replicate * dims.dp_shard) == (plan.tp, plan.pp, plan.dp)
    assert dims.dp_shard == (plan.dp if plan.zero_stage == 3 else 1)  # FSDP2 shards for ZeRO-3
    start_world(plan.num_gpus)
    mesh = dims.build_mesh()
    assert mesh.size() == plan.num_gpus
    if plan.tp > 1:
        assert par.enable_sequence_parallel == plan.sequence_parallel
    ac = config.activation_checkpoint
    if plan.recompute == "none":
        assert not isinstance(ac, SelectiveAC.Config | FullAC.Config)
    else:
        assert isinstance(ac, AC[plan.recompute])
    dp = plan.dp
    accumulation = train.global_batch_size // (train.local_batch_size * dp)
    assert accumulation * train.local_batch_size * dp == plan.global_batch_size
    if plan.pp == 1:
        assert train.local_batch_size == plan.micro_batch_size
        assert accumulation == plan.num_microbatches
        return
    assert par.pipeline_parallel_microbatch_size == plan.micro_batch_size
    assert train.local_batch_size // par.pipeline_parallel_microbatch_size * accumulation == (
        plan.num_microbatches
    )
    stages, n, iw, ow = _get_pipeline_metadata(dims, par, model)
    fqns = par.module_fqns_per_model_part or _generate_llm_fqn_per_model_part(stages, n, iw, ow)
    assert fqns == plan_fqns(plan)
    schedule = par.pipeline_parallel_schedule
    placed = [
        _get_pp_rank_to_stage_indices_mapping(r, plan.pp, schedule, len(fqns))
        for r in range(plan.pp)
    ]
    assert sorted(i for ranks in placed for i in ranks) == list(range(plan.pp * plan.vpp))


SEARCHED = cases("torchtitan")


@pytest.mark.parametrize(("name", "i"), [(name, i) for name, i, _ in SEARCHED])
def test_searched_plans_load_in_torchtitan(name: str, i: int, fake_world: Any) -> None:  # noqa: F811
    (plan,) = [p for n, j, p in SEARCHED if (n, j) == (name, i)]
    check(plan, fake_world)


LLAMA_PLANS = {
    "fsdp tp": make_plan(tp=4, dp=2, zero=3, gbs=64),
    "replicate with tp and pp": make_plan(tp=2, pp=2, dp=4, gbs=64),
    "pp4 even (layers per stage)": make_plan(tp=2, pp=4, gbs=32,
                                             stages=ranges_from_decoders([8, 9, 8, 7])),
    "pp4 uneven (module names)": make_plan(pp=4, gbs=32,
                                           stages=ranges_from_decoders([6, 9, 9, 8])),
    "zb-h1 one stage per rank": make_plan(pp=2, schedule="zb-h1", gbs=16),
    "zbv": make_plan(pp=2, vpp=2, schedule="zbv", gbs=16, recompute="full"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LLAMA_PLANS))
def test_llama8b_plans_load_in_torchtitan(name: str, fake_world: Any) -> None:  # noqa: F811
    plan = LLAMA_PLANS[name]
    assert plan.arch == LLAMA_8B
    check(plan, fake_world)
