"""Megatron-LM arguments the emitter writes, built into megatron-core's own objects.

Megatron-LM's parser (megatron/training/arguments.py) is not on PyPI; its translation of the
flags into a TransformerConfig (validate_args: the virtual-stage count;
core_transformer_config_from_args: same-named fields, --decoder-first/last-pipeline-num-layers
-> num_layers_in_first/last_pipeline_stage, --swiglu -> gated SiLU, --bf16 -> params and pipeline
dtype) is re-stated in `transformer_config` below. megatron-core 0.16.1 then validates the
config (TransformerConfig.__post_init__), and its own layer-split functions
(`get_num_layers_to_build`, `get_transformer_layer_offset`) must give every (pipeline rank,
virtual stage) exactly the plan's decoder blocks; its micro-batch calculator the plan's m.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from launch_plans import LLAMA_8B, make_plan, ranges_from_decoders
from megatron.core import parallel_state
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
from searched_plans import cases

from planner.launch import Deployment, render
from planner.launch.frameworks.megatron_flags import FLAGS
from planner.plan import Plan

VALUED = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--micro-batch-size", "--global-batch-size", "--recompute-num-layers",
    "--num-attention-heads", "--num-query-groups", "--hidden-size", "--ffn-hidden-size",
    "--seq-length", "--max-position-embeddings", "--vocab-size", "--train-iters",
    "--log-interval", "--pipeline-model-parallel-layout", "--recompute-granularity",
    "--recompute-method", "--normalization", "--position-embedding-type", "--tokenizer-type",
    "--lr", "--attention-dropout", "--hidden-dropout", "--context-parallel-size",
}  # fmt: skip
INTS = {f for f in VALUED if f.endswith(("-size", "-layers", "-stage", "-rank", "-heads",
                                          "-groups", "-length", "-embeddings", "-iters",
                                          "-interval"))}  # fmt: skip
FLOATS = {"--lr", "--attention-dropout", "--hidden-dropout"}


def parse(argv: list[str]) -> argparse.Namespace:
    """The emitted flags, parsed by their Megatron-LM types (an unknown flag fails)."""
    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in FLAGS:
        if flag in INTS:
            p.add_argument(flag, type=int)
        elif flag in FLOATS:
            p.add_argument(flag, type=float)
        elif flag == "--cp-comm-type":  # Megatron-LM: nargs="+", one per layer or one for all
            p.add_argument(flag, nargs="+", default=["p2p"])
        elif flag in VALUED:
            p.add_argument(flag)
        else:
            p.add_argument(flag, action="store_true")
    return p.parse_args(argv)


def megatron_args(plan: Plan) -> argparse.Namespace:
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    words = shlex.split(command)
    return parse(words[words.index("pretrain_gpt.py") + 1 :])


def virtual_size(a: argparse.Namespace) -> int | None:
    """validate_args' virtual_pipeline_model_parallel_size (None for one stage per rank)."""
    pp = a.pipeline_model_parallel_size
    if a.pipeline_model_parallel_layout is not None:
        v = PipelineParallelLayerLayout.get_num_stages_from_str(a.pipeline_model_parallel_layout)
        assert v % pp == 0
        v //= pp
    elif a.num_virtual_stages_per_pipeline_rank is not None:
        v = a.num_virtual_stages_per_pipeline_rank
    elif a.num_layers_per_virtual_pipeline_stage is not None:
        n = a.num_layers + a.account_for_embedding_in_pipeline_split
        n += a.account_for_loss_in_pipeline_split
        assert n % pp == 0 and (n // pp) % a.num_layers_per_virtual_pipeline_stage == 0
        v = n // pp // a.num_layers_per_virtual_pipeline_stage
    else:
        return None
    return v if v > 1 else None


def transformer_config(a: argparse.Namespace) -> TransformerConfig:
    kw: dict[str, Any] = {
        "num_layers": a.num_layers,
        "hidden_size": a.hidden_size,
        "num_attention_heads": a.num_attention_heads,
        "ffn_hidden_size": a.ffn_hidden_size,
        "num_query_groups": a.num_query_groups if a.group_query_attention else None,
        "tensor_model_parallel_size": a.tensor_model_parallel_size,
        "pipeline_model_parallel_size": a.pipeline_model_parallel_size,
        "context_parallel_size": a.context_parallel_size or 1,
        "virtual_pipeline_model_parallel_size": virtual_size(a),
        "sequence_parallel": a.sequence_parallel,
        "num_layers_in_first_pipeline_stage": a.decoder_first_pipeline_num_layers,
        "num_layers_in_last_pipeline_stage": a.decoder_last_pipeline_num_layers,
        "account_for_embedding_in_pipeline_split": a.account_for_embedding_in_pipeline_split,
        "account_for_loss_in_pipeline_split": a.account_for_loss_in_pipeline_split,
        "pipeline_model_parallel_layout": a.pipeline_model_parallel_layout,
        "recompute_granularity": a.recompute_granularity,
        "recompute_method": a.recompute_method,
        "recompute_num_layers": a.recompute_num_layers,
        "bf16": a.bf16,
        "params_dtype": torch.bfloat16 if a.bf16 else torch.float32,
        "pipeline_dtype": torch.bfloat16 if a.bf16 else torch.float32,
        "add_bias_linear": not a.disable_bias_linear,
        "normalization": a.normalization or "LayerNorm",
    }
    if a.attention_dropout is not None:
        kw["attention_dropout"] = a.attention_dropout
    if a.hidden_dropout is not None:
        kw["hidden_dropout"] = a.hidden_dropout
    if a.swiglu:
        kw.update(activation_func=F.silu, gated_linear_unit=True, bias_activation_fusion=False)
    return TransformerConfig(**kw)


@pytest.fixture(autouse=True)
def _pipeline_rank_state() -> Iterator[None]:
    """megatron-core reads the pipeline rank and virtual size from parallel_state."""
    yield
    parallel_state.set_pipeline_model_parallel_rank(None)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(None)


def layers_per_stage(config: TransformerConfig) -> list[tuple[int, int]]:
    """(offset, count) of decoder blocks per virtual stage i (rank i % pp, chunk i // pp)."""
    pp = config.pipeline_model_parallel_size
    vpp = config.virtual_pipeline_model_parallel_size
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp)
    out = []
    for i in range(pp * (vpp or 1)):
        rank, chunk = i % pp, (i // pp if vpp else None)
        parallel_state.set_pipeline_model_parallel_rank(rank)
        count = get_num_layers_to_build(config, vp_stage=chunk, pp_rank=rank)
        offset = get_transformer_layer_offset(config, vp_stage=chunk, pp_rank=rank)
        out.append((offset, count))
    return out


def check(plan: Plan) -> None:
    a = megatron_args(plan)
    config = transformer_config(a)
    assert config.tensor_model_parallel_size == plan.tp
    assert config.pipeline_model_parallel_size == plan.pp
    assert config.context_parallel_size == plan.cp
    assert a.cp_comm_type == [plan.cp_comm]
    assert (config.virtual_pipeline_model_parallel_size or 1) == plan.vpp
    assert config.sequence_parallel == plan.sequence_parallel
    n = config.num_layers
    want = [(max(f, 1) - 1, min(e, n + 1) - max(f, 1)) for f, e in (s.layers for s in plan.stages)]
    assert layers_per_stage(config) == want
    calc = ConstantNumMicroBatchesCalculator(
        a.global_batch_size, a.micro_batch_size, plan.dp, decrease_batch_size_if_needed=False,
        rank=0,
    )  # fmt: skip
    assert calc.get() == plan.num_microbatches
    if plan.vpp > 1:
        assert calc.get() % plan.pp == 0  # the interleaved schedule's rule
    assert (config.recompute_granularity or "none") == plan.recompute


SEARCHED = cases("megatron")


@pytest.mark.parametrize(("name", "i"), [(name, i) for name, i, _ in SEARCHED])
def test_searched_plans_build_in_megatron_core(name: str, i: int) -> None:
    (plan,) = [p for n, j, p in SEARCHED if (n, j) == (name, i)]
    check(plan)


# decoder blocks per virtual stage of Llama-3-8B (32 blocks), by pp; one per split flag family
SPLITS = {
    "even": (4, [8, 8, 8, 8], None),
    "account for the embedding": (3, [10, 11, 11], "--account-for-embedding-in-pipeline-split"),
    "account for the loss": (3, [11, 11, 10], "--account-for-loss-in-pipeline-split"),
    "first/last differ": (4, [6, 9, 9, 8], "--decoder-first-pipeline-num-layers"),
    "irregular (layout)": (4, [5, 9, 10, 8], "--pipeline-model-parallel-layout"),
    "interleaved even": (2, [8, 8, 8, 8], "--num-layers-per-virtual-pipeline-stage"),
    "interleaved first/last": (4, [3, 4, 4, 5] * 2, "--num-virtual-stages-per-pipeline-rank"),
    "interleaved layout": (4, [3, 5, 4, 4, 4, 4, 5, 3], "--pipeline-model-parallel-layout"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SPLITS))
def test_uneven_splits_build_in_megatron_core(name: str) -> None:
    pp, counts, flag = SPLITS[name]
    vpp = len(counts) // pp
    plan = make_plan(arch=LLAMA_8B, tp=2, pp=pp, vpp=vpp, sp=True, gbs=48,
                     schedule="interleaved-1f1b" if vpp > 1 else "1f1b",
                     stages=ranges_from_decoders(counts))  # fmt: skip
    command = render(plan, Deployment(), target="torchrun", framework="megatron").commands[0]
    assert flag is None or flag in shlex.split(command)
    check(plan)
