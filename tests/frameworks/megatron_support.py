"""Megatron-LM's argument types and megatron-core's view of a plan, shared by the Megatron tests:
the flags' value kinds (VALUED, INTS, FLOATS), the TransformerConfig built from parsed
arguments (transformer_config, as core_transformer_config_from_args does) and the decoder
blocks megatron-core builds per virtual stage (layers_per_stage)."""

from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout
from megatron.core.transformer.transformer_block import get_num_layers_to_build
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

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
