"""Decoder layer kinds, and one rank's LayerCost of a decoder layer of a model with `moe`,
`mla`, `head_dim` or `sliding_window` (the dense catalog's `planner.catalog.models.
_decoder_cost` for the rest).

The layer's shape on the rank (planner.catalog.layer_work.Shape): tp shards the heads and
the dense MLP, cp leaves s / cp tokens, a sliding layer's queries attend min(s, window)
keys; an MoE layer's dense MLP is its shared experts (width n_s x f_e, tp-parallel) and its
routed experts are planner.catalog.moe_work's (E / ep local experts sharded over etp).
FLOPs, parameters and saved bytes follow planner.catalog.moe's single-device formulas,
divided as the degrees divide the work (docs/moe.md, "Folding the degrees").
"""

from __future__ import annotations

from dataclasses import replace

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec
from planner.catalog.layer_work import (
    LayerWork,
    Shape,
    cp_gather_times,
    decoder_flops,
    decoder_work,
)
from planner.catalog.moe import attention_matrix_params, mlp_params
from planner.catalog.moe_work import (
    DEFAULT_ROUTING,
    ExpertShape,
    RoutingTerms,
    expert_floor_parts,
    expert_parts,
    expert_shape,
    mla_parts,
)
from planner.specs.base import ModeValues
from planner.specs.model import LayerCost, ModelArch

DECODER = "decoder"


def decoder_kind(arch: ModelArch, index: int) -> str:
    """The kind of decoder layer `index`: layers whose costs differ get different kinds (costs
    are computed and cached per kind): `decoder` (dense MLP, full attention), with `_moe` for
    an MoE layer and `_sliding` for a sliding-window layer."""
    kind = DECODER
    if arch.is_moe_layer(index):
        kind += "_moe"
    sw = arch.sliding_window
    if sw is not None and sw.is_sliding(index):
        kind += "_sliding"
    return kind


def layer_shape(arch: ModelArch, index: int, x: Shape) -> Shape:
    """`x` for decoder layer `index`: its window and, for an MoE layer, the shared experts
    as the dense MLP."""
    sw = arch.sliding_window
    window = sw.window if sw is not None and sw.is_sliding(index) else 0
    moe = arch.moe
    ffn = x.f
    if moe is not None and moe.is_moe_layer(index):
        ffn = moe.num_shared_experts * moe.moe_ffn_hidden_size
    return replace(x, f=ffn, window=window)


def _experts(
    arch: ModelArch, index: int, x: Shape, *, ep: int, etp: int, routing: RoutingTerms
) -> ExpertShape | None:
    moe = arch.moe
    if moe is None or not moe.is_moe_layer(index):
        return None
    return expert_shape(
        moe,
        tokens=x.tokens,
        tp=x.t,
        ep=ep,
        etp=etp,
        gated=arch.family == "llama",
        routing=routing,
    )


def general_decoder_work(
    arch: ModelArch,
    index: int,
    x: Shape,
    *,
    gpu: GpuSpec,
    eff: Efficiency,
    ep: int = 1,
    etp: int = 1,
    routing: RoutingTerms = DEFAULT_ROUTING,
) -> LayerWork:
    """The named parts of decoder layer `index` on one rank."""
    lx = layer_shape(arch, index, x)
    es = _experts(arch, index, lx, ep=ep, etp=etp, routing=routing)
    projections = mla_parts(lx, arch.mla, gpu, eff) if arch.mla is not None else None
    experts = expert_parts(lx, es, gpu, eff) if es is not None else ()
    return decoder_work(lx, arch.family, gpu, eff, projections=projections, experts=experts)


def general_decoder_floor_work(
    arch: ModelArch,
    index: int,
    x: Shape,
    *,
    gpu: GpuSpec,
    eff: Efficiency,
    routing: RoutingTerms = DEFAULT_ROUTING,
) -> LayerWork:
    """general_decoder_work's parts with the routed experts' replaced by their floors over
    every ep and etp (moe_work.expert_floor_parts); the other parts do not read ep or etp.
    Its fw_s, bw_input_s and bw_weight_s are therefore at most general_decoder_work's at
    every (ep, etp): the same sums, term by term no larger (rounded addition is monotone)."""
    lx = layer_shape(arch, index, x)
    es = _experts(arch, index, lx, ep=1, etp=1, routing=routing)
    projections = mla_parts(lx, arch.mla, gpu, eff) if arch.mla is not None else None
    experts = expert_floor_parts(lx, es, gpu, eff) if es is not None else ()
    return decoder_work(lx, arch.family, gpu, eff, projections=projections, experts=experts)


def _params(arch: ModelArch, x: Shape, es: ExpertShape | None) -> tuple[float, float]:
    """(all, routed experts) parameters of the layer on one rank: attention weights and the
    dense MLP (or shared experts) split by t, norms and the router whole, the routed experts
    E / ep of them each / etp (planner.catalog.moe.param_counts per rank)."""
    h, t = x.h, x.t
    gpt = arch.family == "gpt"
    matrices = attention_matrix_params(arch)
    dq = x.head_dim
    bias = x.a * dq + 2 * x.kv * dq if gpt else 0  # q, k, v biases (split); o's bias whole
    norms = (4 * h + h) if gpt else 2 * h  # two LayerNorms (weight, bias) + o's bias; RMSNorm
    if arch.mla is not None:
        norms += (arch.mla.q_lora_rank or 0) + arch.mla.kv_lora_rank
    dense = (matrices + bias) / t + norms
    if x.f > 0:
        mlp = mlp_params(arch, x.f)
        dense += (mlp - h) / t + h if gpt else mlp / t  # gpt: fc2's bias whole
    if es is None:
        return dense, 0.0
    dense += h * es.num_experts  # the router, replicated
    expert = es.param_count(mlp_params(arch, es.ffn))
    return dense + expert, expert


def _activations(arch: ModelArch, x: Shape, es: ExpertShape | None) -> ModeValues:
    """Saved bytes on one rank (planner.catalog.moe.layer_activation_bytes, divided as the
    degrees divide it): norm inputs and the QKV / MLP inputs 4 T h d / q (sequence parallel
    shards them), Q (T a dq), K and V (T g (dq + dv)), the output projection's input
    (T a dv) and the fp32 log-sum-exp 4 T a, split by t; MLA's latents T (q_lora + kv_lora)
    split by t; the dense MLP (or shared experts) 3 T f d / t (gpt: 2 T f d / t); the routed
    part (moe_work.ExpertShape.activation_bytes). Full recompute keeps the layer input T h d
    / q. gpt's unfused core (2d + 1) a s keys b / t, dropped by selective recompute (none
    under context parallelism, whose attention is fused)."""
    d, tok = float(x.d), float(x.tokens)
    dq, dv = x.head_dim, x.value_dim
    rep = 4.0 * tok * x.h * d + (2.0 * tok * x.h if arch.family == "gpt" else 0.0)
    shard = tok * (x.a * dq + x.kv * (dq + dv) + x.a * dv) * d + 4.0 * tok * x.a
    if arch.mla is not None:
        shard += tok * ((arch.mla.q_lora_rank or 0) + arch.mla.kv_lora_rank) * d
    shard += (3.0 if arch.family == "llama" else 2.0) * tok * x.f * d
    core = 0.0
    if arch.family == "gpt" and not x.fused_core:
        core = (2.0 * d + 1.0) * x.a * x.s * x.b * x.keys
    selective = rep / x.q + shard / x.t
    if es is not None:
        selective += es.activation_bytes(x.h, x.d)
    return ModeValues(none=selective + core / x.t, selective=selective, full=tok * x.h * d / x.q)


def general_decoder_cost(
    arch: ModelArch,
    index: int,
    x: Shape,
    *,
    gpu: GpuSpec,
    eff: Efficiency,
    ep: int = 1,
    etp: int = 1,
    routing: RoutingTerms = DEFAULT_ROUTING,
) -> LayerCost:
    """The LayerCost of decoder layer `index` on one rank (module docstring). Backward and
    recompute as the dense catalog's (planner.catalog.models._decoder_cost); the attention
    core's own times are kept for the context-parallel ring's overlap, the K/V bytes a ring
    step sends, the token copies of the EP all-to-alls and the rows of the etp gather."""
    lx = layer_shape(arch, index, x)
    es = _experts(arch, index, lx, ep=ep, etp=etp, routing=routing)
    work = general_decoder_work(arch, index, x, gpu=gpu, eff=eff, ep=ep, etp=etp, routing=routing)
    linear, core = decoder_flops(lx, swiglu=arch.family == "llama")
    flops = linear + core + (es.model_flops(lx.h) if es is not None else 0.0)
    params, expert = _params(arch, lx, es)
    attention = next(p for p in work.parts if p.kind == "attention")
    cp = lx.c > 1
    kv_bytes = lx.cp_kv_bytes
    gather = cp_gather_times(lx, gpu, eff) if cp else (0.0, 0.0)
    return LayerCost(
        fw_s=work.fw_s,
        bw_input_s=work.bw_input_s,
        bw_weight_s=work.bw_weight_s,
        recompute_s=ModeValues(none=0.0, selective=work.selective_s, full=work.fw_s),
        activation_bytes=_activations(arch, lx, es),
        param_bytes=params * lx.d,
        param_count=params,
        output_bytes=lx.e * lx.d / lx.q,
        tp_comm_bytes=4.0 * lx.e * lx.d if lx.t > 1 else 0.0,
        fw_flops=flops,
        expert_param_count=expert,
        cp_kv_bytes=kv_bytes,
        attention_fw_s=attention.fw_s if cp else 0.0,
        attention_bw_s=attention.bw_input_s if cp else 0.0,
        cp_gather_fw_s=gather[0],
        cp_gather_bw_s=gather[1],
        ep_dispatch_bytes=es.dispatch_bytes(lx.h, lx.d) if es is not None and ep > 1 else 0.0,
        etp_gather_bytes=es.gathered_bytes(lx.h, lx.d) if es is not None and etp > 1 else 0.0,
    )
