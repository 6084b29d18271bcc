"""torchtitan 0.3.0 loads the emitted context- and expert-parallel command lines.

Its ConfigManager parses them (the MoE model by its own config function, matched by shape),
its ParallelDims takes the degrees (dp_replicate x dp_shard x cp x tp x pp = world), and the
device mesh it builds on a fake process group has the plan's cp and ep groups (its sparse
mesh pp x dp_replicate x efsdp x ep, efsdp = dp_shard cp tp / ep). What 0.3.0 cannot express
(etp > 1, a p2p ring, ep not dividing dp_shard cp tp) is refused by name.
"""

from __future__ import annotations

import pytest
from launch_plans import LLAMA_8B, make_plan, qwen3_30b_capacity
from torchtitan.config import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
from torchtitan_support import fake_world, titan_argv  # noqa: F401 - the fixture

from planner.catalog.models import PRESETS
from planner.launch import Deployment, unsupported
from planner.launch.frameworks.torchtitan import module_config
from planner.plan import Plan

QWEN3 = PRESETS["qwen3-30b-a3b"]

PLANS = {
    "qwen3-30b ep8 fsdp8": lambda: make_plan(arch=QWEN3, dp=8, ep=8, zero=3, gbs=16, seq=4096),
    "qwen3-30b cp2 ep4 fsdp4": lambda: make_plan(arch=QWEN3, cp=2, dp=4, ep=4, zero=3, gbs=16,
                                                 seq=8192, cp_comm="all_gather"),
    "llama3-8b cp4 fsdp2": lambda: make_plan(arch=LLAMA_8B, cp=4, dp=2, zero=3, gbs=8,
                                             seq=32768, cp_comm="all_gather"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLANS))
def test_cp_and_ep_plans_load_in_torchtitan(name: str, fake_world) -> None:  # noqa: F811
    plan: Plan = PLANS[name]()
    assert unsupported(plan, "torchtitan") == []
    config = ConfigManager().parse_args(titan_argv(plan))
    par = config.parallelism
    assert (par.context_parallel_degree, par.expert_parallel_degree) == (plan.cp, plan.ep)
    assert len(config.model_spec.model.layers) == plan.arch.num_layers  # type: ignore[union-attr]
    dims = ParallelDims.from_config(par, plan.num_gpus)
    assert (dims.cp, dims.ep, dims.tp, dims.pp) == (plan.cp, plan.ep, plan.tp, plan.pp)
    assert dims.dp_replicate * dims.dp_shard == plan.dp
    fake_world(plan.num_gpus)
    dims.build_mesh()
    if plan.cp > 1:
        assert dims.get_mesh("cp").size() == plan.cp
    if plan.ep > 1:
        assert dims.get_mesh("ep").size() == plan.ep
        assert dims.get_mesh("efsdp").size() == plan.dp * plan.cp * plan.tp // plan.ep


def test_what_torchtitan_030_cannot_express_is_refused() -> None:
    ring = make_plan(arch=LLAMA_8B, cp=2, dp=4, zero=3, gbs=8, seq=8192)
    assert any(
        "cp_comm='p2p'" in r and "rotate method" in r for r in unsupported(ring, "torchtitan")
    )
    etp = make_plan(arch=QWEN3, tp=2, dp=4, ep=4, etp=2, zero=3, gbs=16, sp=True)
    assert any(
        r.startswith("etp=2: torchtitan 0.3.0 has no expert tensor")
        for r in unsupported(etp, "torchtitan")
    )
    replicated = qwen3_30b_capacity(ep=8, zero=0)
    assert any(
        "ep=8 must divide dp_shard*cp*tp = 1*1*1 = 1" in r
        for r in unsupported(replicated, "torchtitan")
    )


@pytest.mark.parametrize("preset", ["qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"])
def test_the_moe_config_function_picked_has_the_presets_shapes(preset: str) -> None:
    """torchtitan's own config function (matched by shape) builds the preset's layers,
    experts, top-k and router score function."""
    arch = PRESETS[preset]
    module, function = module_config(arch, Deployment())
    assert function is not None
    config = ConfigManager().parse_args(["--module", module, "--config", function])
    layers = config.model_spec.model.layers
    assert len(layers) == arch.num_layers
    moe = arch.moe
    assert moe is not None
    routed = [layer.moe for layer in layers if getattr(layer, "moe", None) is not None]
    assert len(routed) == arch.num_moe_layers
    assert {(m.num_experts, m.router.top_k) for m in routed} == {
        (moe.num_experts, moe.experts_per_token)
    }
    assert {m.router.score_func for m in routed} == {moe.router}
