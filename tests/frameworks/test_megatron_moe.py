"""Megatron-LM arguments of MoE and context-parallel plans, built into megatron-core's objects.

The emitted flags are parsed by their Megatron-LM types (every flag defined by its own parser,
planner/launch/frameworks/megatron_flags.py), translated into megatron-core 0.16.1's
TransformerConfig / MLATransformerConfig as core_transformer_config_from_args does (same-named
fields; --num-experts -> num_moe_experts; --moe-layer-freq through Megatron's moe_freq_type
rule), whose __post_init__ validates the MoE and CP settings; then megatron-core's own
RankGenerator pair (parallel_state.initialize_model_parallel: attention tp-cp-dp-pp, experts
etp-ep-edp-pp, order tp-cp-ep-dp-pp) must tile the plan's GPUs with the plan's edp.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest
from launch_plans import (
    deepseek_v3_2048,
    llama3_405b_cp16,
    make_plan,
    mixtral_8x7b_64,
    qwen3_30b_capacity,
)
from megatron.core.parallel_state import RankGenerator
from megatron.core.transformer.transformer_config import MLATransformerConfig
from megatron_support import FLOATS, INTS, VALUED, layers_per_stage, transformer_config

from planner.catalog.models import PRESETS
from planner.launch import Deployment, render, unsupported
from planner.launch.frameworks.megatron_flags import FLAGS
from planner.plan import Plan

MOE_INTS = {
    "--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--kv-channels", "--q-lora-rank", "--kv-lora-rank",
    "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
}  # fmt: skip
MOE_STRS = {
    "--cp-comm-type", "--moe-layer-freq", "--moe-router-score-function",
    "--moe-router-load-balancing-type", "--moe-token-dispatcher-type",
}  # fmt: skip


def moe_freq_type(x: str) -> int | list[int]:
    """megatron/training/arguments.py moe_freq_type: an int, or a Python list expression."""
    return eval(x) if "[" in x else int(x)  # Megatron's own rule


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in FLAGS:
        if flag in INTS or flag in MOE_INTS:
            p.add_argument(flag, type=int)
        elif flag in FLOATS or flag == "--moe-expert-capacity-factor":
            p.add_argument(flag, type=float)
        elif flag == "--moe-layer-freq":
            p.add_argument(flag, type=moe_freq_type, default=1)
        elif flag == "--cp-comm-type":
            p.add_argument(flag, nargs="+", default=["p2p"])
        elif flag in VALUED or flag in MOE_STRS:
            p.add_argument(flag)
        else:
            p.add_argument(flag, action="store_true")
    return p.parse_args(argv)


def megatron_args(plan: Plan) -> argparse.Namespace:
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    words = shlex.split(command)
    return parse(words[words.index("pretrain_gpt.py") + 1 :])


def moe_config(a: argparse.Namespace) -> Any:
    base = transformer_config(a)
    kw: dict[str, Any] = {
        f.name: getattr(base, f.name) for f in base.__dataclass_fields__.values() if f.init
    }
    kw.update(
        context_parallel_size=a.context_parallel_size or 1,
        cp_comm_type=a.cp_comm_type[0] if len(a.cp_comm_type) == 1 else a.cp_comm_type,
        expert_model_parallel_size=a.expert_model_parallel_size or 1,
        expert_tensor_parallel_size=a.expert_tensor_parallel_size,
        kv_channels=a.kv_channels,
    )
    if a.num_experts is not None:
        kw.update(
            num_moe_experts=a.num_experts,
            moe_router_topk=a.moe_router_topk,
            moe_ffn_hidden_size=a.moe_ffn_hidden_size,
            moe_shared_expert_intermediate_size=a.moe_shared_expert_intermediate_size,
            moe_layer_freq=a.moe_layer_freq,
            moe_router_score_function=a.moe_router_score_function,
            moe_router_enable_expert_bias=a.moe_router_enable_expert_bias,
            moe_router_load_balancing_type=a.moe_router_load_balancing_type,
            moe_expert_capacity_factor=a.moe_expert_capacity_factor,
            moe_token_dispatcher_type=a.moe_token_dispatcher_type,
            moe_grouped_gemm=a.moe_grouped_gemm,
        )
    if a.multi_latent_attention:
        kw.update(
            multi_latent_attention=True, q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
            qk_head_dim=a.qk_head_dim, qk_pos_emb_head_dim=a.qk_pos_emb_head_dim,
            v_head_dim=a.v_head_dim,
        )  # fmt: skip
        kw.pop("kv_channels")
        return MLATransformerConfig(**kw)
    return type(base)(**kw)


def moe_layers(cfg: Any) -> list[int]:
    """megatron/core/models/gpt/moe_module_specs / transformer_block: 1 where a layer is MoE."""
    f, n = cfg.moe_layer_freq, cfg.num_layers
    return [int(i % f == 0) for i in range(n)] if isinstance(f, int) else list(f)


PLANS = {
    "mixtral-8x7b tp1 ep8 pp4 vp8": mixtral_8x7b_64,
    "llama3-405b tp8 cp16 pp16 dp4": llama3_405b_cp16,
    "deepseek-v3 pp16 ep64 zero1": deepseek_v3_2048,
    "qwen3-30b cp2 ep4 capacity": lambda: qwen3_30b_capacity(cp=2, ep=4),
    "mixtral tp2 ep2 etp2 sp": lambda: make_plan(arch=PRESETS["mixtral-8x7b"], tp=2, dp=2,
                                                 ep=2, etp=2, sp=True, gbs=16),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PLANS))
def test_moe_and_cp_plans_build_in_megatron_core(name: str) -> None:
    plan = PLANS[name]()
    a = megatron_args(plan)
    cfg = moe_config(a)
    assert cfg.context_parallel_size == plan.cp
    assert cfg.expert_model_parallel_size == plan.ep
    n = plan.arch.num_layers  # type: ignore[union-attr]
    want = [(max(f, 1) - 1, min(e, n + 1) - max(f, 1)) for f, e in (s.layers for s in plan.stages)]
    assert layers_per_stage(cfg) == want
    moe = plan.arch.moe  # type: ignore[union-attr]
    if moe is None:
        assert cfg.num_moe_experts is None
    else:
        assert cfg.num_moe_experts == moe.num_experts
        assert cfg.moe_router_topk == moe.experts_per_token
        assert (cfg.expert_tensor_parallel_size or cfg.tensor_model_parallel_size) == plan.etp
        assert moe_layers(cfg) == [int(moe.is_moe_layer(i)) for i in range(n)]
        shared = moe.num_shared_experts * moe.moe_ffn_hidden_size or None
        assert cfg.moe_shared_expert_intermediate_size == shared
        assert cfg.moe_expert_capacity_factor == moe.capacity_factor
    if plan.arch.head_dim is not None:  # type: ignore[union-attr]
        assert cfg.kv_channels == plan.arch.head_dim  # type: ignore[union-attr]
    # parallel_state.initialize_model_parallel's two rank generators on the plan's GPUs
    order = "tp-cp-ep-dp-pp"
    dense = RankGenerator(tp=plan.tp, ep=1, dp=plan.dp, pp=plan.pp, cp=plan.cp, order=order)
    edp = plan.num_gpus // (plan.etp * plan.ep * plan.pp)
    expert = RankGenerator(tp=plan.etp, ep=plan.ep, dp=edp, pp=plan.pp, cp=1, order=order)
    assert dense.world_size == expert.world_size == plan.num_gpus
    assert edp == plan.edp
    assert dense.get_ranks("pp") == expert.get_ranks("pp")  # Megatron's own assertion
    assert {len(g) for g in expert.get_ranks("ep")} == {plan.ep}
    assert {len(g) for g in dense.get_ranks("cp")} == {plan.cp}


def test_ep_with_tp_needs_sequence_parallel_in_megatron_core_too() -> None:
    plan = make_plan(arch=PRESETS["mixtral-8x7b"], tp=2, dp=2, ep=2, gbs=16)
    (reason,) = unsupported(plan, "megatron")
    assert "needs sequence_parallel" in reason
    a = parse(
        shlex.split(
            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --num-layers 32 "
            "--hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 "
            "--expert-model-parallel-size 2 --num-experts 8 --moe-router-topk 2 "
            "--moe-token-dispatcher-type alltoall --disable-bias-linear --bf16"
        )
    )
    # megatron-core 0.12 raises this; the installed 0.16.1 warns
    with pytest.warns(UserWarning, match="sequence parallelism must be used"):
        moe_config(a)
