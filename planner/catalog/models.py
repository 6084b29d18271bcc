"""Analytic model families -> per-layer costs and a ModelProfile (source "analytic").

The layer list of a built-in family, in execution order: `embedding` (token + position
embeddings, dropout), `num_layers` decoder blocks (`decoder`), and `head` (final norm, output
projection and the cross-entropy loss). Stage boundaries index this list.

Families:
- `gpt`: Megatron GPT (Narayanan et al. 2021; Korthikanti et al. 2022): LayerNorm, GELU MLP
  with `ffn` = 4h by default, learned positions, dropout, tied input/output embeddings and the
  attention core as Megatron 2021 runs it (softmax and dropout materialise a x s x s scores).
- `llama`: RMSNorm, SwiGLU MLP (three matmuls of h x ffn), grouped-query attention with
  `num_kv_heads`, rotary positions, no dropout, untied embeddings, and a fused (flash)
  attention core that never materialises the s x s scores.

Symbols: s sequence length, b micro-batch size, h hidden, a heads, r = kv_heads / a, f ffn,
V vocabulary, t tp degree, q = t with sequence parallel else 1 (what the replicated parts are
divided by), d bytes per activation element (2 for bf16), e = s*b*h elements.
Times come from `planner.catalog.layer_work`: per-kernel times from each GEMM's shape
(planner.catalog.kernels) with the calibrated constants of `planner.catalog.efficiency`.
"""

from __future__ import annotations

from collections.abc import Iterable

from planner.catalog.decoder_kinds import (
    DECODER,
    decoder_kind,
    general_decoder_cost,
    general_decoder_floor_work,
    general_decoder_work,
)
from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.catalog.hardware import GpuSpec
from planner.catalog.layer_work import (
    LayerWork,
    Shape,
    cp_gather_times,
    decoder_flops,
    decoder_work,
    embedding_work,
    head_work,
)
from planner.catalog.moe import attention_matrix_params, qk_v_head_dims
from planner.catalog.moe_work import DEFAULT_ROUTING, RoutingTerms
from planner.catalog.ring_attention import MEGATRON_CORE, RingAttention
from planner.specs.base import DTYPE_BYTES, ModeValues
from planner.specs.cluster import ClusterSpec
from planner.specs.model import LayerCost, LayerRef, ModelArch, ModelProfile, ProfilePoint
from planner.specs.training import TrainingSpec

EMBEDDING, HEAD = "embedding", "head"


def layer_refs(arch: ModelArch) -> tuple[LayerRef, ...]:
    blocks = tuple(
        LayerRef(name=f"decoder.{i}", kind=decoder_kind(arch, i)) for i in range(arch.num_layers)
    )
    return (LayerRef(name="embedding", kind=EMBEDDING), *blocks, LayerRef(name="head", kind=HEAD))


def _decoder_activations(x: Shape, family: str) -> ModeValues:
    """Bytes saved for backward per micro-batch (Korthikanti et al. 2022, §4.1 and Table 2).

    gpt (no parallelism: 34sbh + 5as^2b): replicated 10sbh (LN inputs 4, QKV input 2, MLP input 2,
    two dropout masks 2), sharded by t: Q, K, V and the projection input (8sbh with r = 1), GELU
    input and fc2 input (16sbh with f = 4h), and the core 5as^2b (softmax output, dropout mask
    and output). With sequence parallel the replicated part is divided by t too.
    llama: no dropout masks; the fused attention saves Q, K, V, O and fp32 log-sum-exp
    (4*s*b*a bytes) instead of the scores; SwiGLU saves gate, up and the down-projection input.
    Selective recompute drops the core (gpt); full recompute keeps the layer input, 2sbh
    (divided by t with sequence parallel, as Megatron keeps it sharded).
    """
    d, e = x.d, x.e
    if family == "gpt":
        rep = 4.0 * e * d + 2.0 * e
        shard = (2.0 + 2.0 * x.r) * e * d + 2.0 * x.sbf * d
        core = (2.0 * d + 1.0) * x.scores
        if x.fused_core:  # context parallel: the fused core saves its fp32 log-sum-exp
            shard, core = shard + 4.0 * x.sl * x.b * x.a, 0.0
    else:
        rep = 4.0 * e * d
        shard = (2.0 + 2.0 * x.r) * e * d + 4.0 * x.sl * x.b * x.a + 3.0 * x.sbf * d
        core = 0.0
    selective = rep / x.q + shard / x.t
    return ModeValues(none=selective + core / x.t, selective=selective, full=e * d / x.q)


def _decoder_params(x: Shape, family: str) -> float:
    """Parameters of one decoder layer held by one tp rank.

    gpt: 12h^2 + 13h for f = 4h (Narayanan 2021, Eq. 2): QKV and projection h^2(2 + 2r), MLP
    2hf, column-parallel biases h(1 + 2r) + f (split by t), projection and fc2 biases and two
    LayerNorms 6h (replicated). llama: h^2(2 + 2r) + 3hf split by t, two RMSNorm weights 2h.
    """
    h, f, r, t = x.h, x.f, x.r, x.t
    if family == "gpt":
        return (h * h * (2 + 2 * r) + 2 * h * f + h * (1 + 2 * r) + f) / t + 6 * h
    return (h * h * (2 + 2 * r) + 3 * h * f) / t + 2 * h


def _decoder_cost(x: Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    # Times: planner.catalog.layer_work (GEMMs by shape, attention core, element-wise).
    # Backward = dgrads + the core's backward (input gradient B) and wgrads (weight gradient
    # W), Qi et al. 2024 Table 1. Recompute: selective re-runs the attention core (Korthikanti
    # 2022 §5; nothing for llama, whose fused kernel recomputes it), full the whole forward.
    w = decoder_work(x, family, gpu, eff)
    linear, core = decoder_flops(x, swiglu=family == "llama")
    fw_s = w.fw_s
    params = _decoder_params(x, family)
    # what the context-parallel exchange sends and overlaps (planner.cost.folded)
    kv_bytes = attention_fw = attention_bw = gather_fw = gather_bw = 0.0
    if x.c > 1:
        attention = next(p for p in w.parts if p.kind == "attention")
        kv_bytes = x.cp_kv_bytes
        attention_fw, attention_bw = attention.fw_s, attention.bw_input_s
        gather_fw, gather_bw = cp_gather_times(x, gpu, eff)
    return LayerCost(
        fw_s=fw_s,
        bw_input_s=w.bw_input_s,
        bw_weight_s=w.bw_weight_s,
        recompute_s=ModeValues(none=0.0, selective=w.selective_s, full=fw_s),
        activation_bytes=_decoder_activations(x, family),
        param_bytes=params * x.d,
        param_count=params,
        output_bytes=x.e * x.d / x.q,
        # Megatron: 2 all-reduces of b*s*h in the forward and 2 in the backward per layer
        # (Shoeybi et al. 2019, Fig. 4); sequence parallel: all-gather + reduce-scatter of the
        # same volume (Korthikanti 2022 §4.2.2).
        tp_comm_bytes=4.0 * x.e * x.d if x.t > 1 else 0.0,
        fw_flops=linear + core,
        cp_kv_bytes=kv_bytes,
        attention_fw_s=attention_fw,
        attention_bw_s=attention_bw,
        cp_gather_fw_s=gather_fw,
        cp_gather_bw_s=gather_bw,
    )


def _constant_modes(value: float) -> ModeValues:
    return ModeValues(none=value, selective=value, full=value)


def _embedding_cost(x: Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    """Token (vocab-parallel, V*h/t) + learned position (gpt, s*h replicated) embeddings.

    No matmul FLOPs; memory-bound kernels (planner.catalog.layer_work.embedding_work). Saved:
    gpt's dropout mask
    (Korthikanti 2022 §4.3: s*b*h/t with sequence parallel).
    """
    d, e = x.d, x.e
    w = embedding_work(x, family, gpu, eff)
    saved = e / x.q if family == "gpt" else 0.0
    params = x.v * x.h / x.t + (x.s * x.h if family == "gpt" else 0)
    return LayerCost(
        fw_s=w.fw_s,
        bw_input_s=w.bw_input_s,
        bw_weight_s=w.bw_weight_s,
        recompute_s=_constant_modes(0.0),
        activation_bytes=_constant_modes(saved),
        param_bytes=params * x.d,
        param_count=params,
        output_bytes=e * d / x.q,
        # the vocab-parallel lookup is summed over the group in the forward (all-reduce, or
        # reduce-scatter with sequence parallel); counted as one collective each way.
        tp_comm_bytes=2.0 * e * d if x.t > 1 else 0.0,
        fw_flops=0.0,
    )


def _head_cost(x: Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    """Final norm + output projection (h x V/t) + vocab-parallel cross-entropy.

    FLOPs: 2*s*b*h*V/t forward (the V/(16Lh) term of Narayanan 2021 Eq. 3), the same again for
    the input gradient and for the weight gradient; times: planner.catalog.layer_work.head_work.
    Saved (Korthikanti 2022 §4.3): norm and projection inputs 2e*d/q and the fp32 logits
    4*s*b*V/t. Never recomputed. With tied embeddings (gpt) the head holds its own copy of the
    word embeddings (Megatron keeps it on the last stage and all-reduces the two gradients);
    the cost model drops that copy when embedding and head sit on the same pipeline rank.
    """
    d, e = x.d, x.e
    w = head_work(x, family, gpu, eff)
    flops = 2.0 * e * x.v / x.t
    logits = 4.0 * x.sl * x.b * x.v / x.t
    norm_params = 2 * x.h if family == "gpt" else x.h
    params = x.v * x.h / x.t + norm_params
    return LayerCost(
        fw_s=w.fw_s,
        bw_input_s=w.bw_input_s,
        bw_weight_s=w.bw_weight_s,
        recompute_s=_constant_modes(0.0),
        activation_bytes=_constant_modes(2.0 * e * d / x.q + logits),
        param_bytes=params * x.d,
        param_count=params,
        output_bytes=4.0 * x.sl * x.b,  # per-token fp32 losses
        # input identity/all-gather in the forward, all-reduce/reduce-scatter of the input
        # gradient in the backward, plus cross-entropy's three fp32 all-reduces of s*b.
        tp_comm_bytes=2.0 * e * d + 3.0 * 4.0 * x.sl * x.b if x.t > 1 else 0.0,
        fw_flops=flops,
    )


def _shape(
    arch: ModelArch,
    *,
    dtype: str,
    seq_length: int,
    micro_batch_size: int,
    tp: int,
    sequence_parallel: bool,
    cp: int = 1,
    ring: RingAttention = MEGATRON_CORE,
) -> Shape:
    a = arch.num_attention_heads
    kv = a if arch.mla is not None else arch.kv_heads  # MLA: every head its own K and V
    if tp <= 0 or a % tp or kv % tp:
        raise ValueError(f"tp={tp} must divide num_attention_heads={a} and num_kv_heads={kv}")
    if sequence_parallel and tp == 1:
        raise ValueError("sequence_parallel needs tp > 1")
    if cp <= 0 or seq_length % (2 * cp):
        raise ValueError(
            f"cp={cp}: seq_length={seq_length} must split into 2*cp = {2 * cp} equal chunks"
        )
    if cp > 1 and not arch.fused_attention:
        raise ValueError(f"cp={cp} needs a fused attention kernel ({arch.display_name}: unfused)")
    dq = dv = 0
    weights = 0
    if not arch.is_plain:
        dq, dv = qk_v_head_dims(arch)
        if arch.mla is not None:
            weights = attention_matrix_params(arch)
    return Shape(
        s=seq_length,
        b=micro_batch_size,
        h=arch.hidden_size,
        a=a,
        kv=kv,
        f=arch.ffn,
        v=arch.vocab_size,
        t=tp,
        q=tp if sequence_parallel else 1,
        d=DTYPE_BYTES[dtype],
        c=cp,
        fused=arch.fused_attention,
        dq=dq,
        dv=dv,
        attn_weights=weights,
        ring=ring,
    )


def analytic_costs(
    arch: ModelArch,
    *,
    gpu: GpuSpec,
    dtype: str,
    seq_length: int,
    micro_batch_size: int,
    tp: int,
    sequence_parallel: bool,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    routing: RoutingTerms = DEFAULT_ROUTING,
    ring: RingAttention = MEGATRON_CORE,
) -> dict[str, LayerCost]:
    """Costs of each layer kind of `arch` (`embedding`, the decoder kinds of `decoder_kind`,
    `head`) on one rank: tp shards, the rank's s / cp tokens, and for MoE layers its
    E / ep experts sharded over etp (planner.catalog.moe_work); `ring` the framework's
    context-parallel attention (planner.catalog.ring_attention).

    Times exclude communication (the cost model adds TP, CP and EP from the bytes on the
    links the groups sit on). Raises ValueError if tp does not divide the heads and kv
    heads, cp does not split the sequence into 2 cp chunks, or ep the experts.
    """
    x = _shape(
        arch,
        dtype=dtype,
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        tp=tp,
        sequence_parallel=sequence_parallel,
        cp=cp,
        ring=ring,
    )
    fam = arch.family
    out = {EMBEDDING: _embedding_cost(x, fam, gpu, efficiency)}
    if arch.is_plain:
        out[DECODER] = _decoder_cost(x, fam, gpu, efficiency)
    else:
        for i in range(arch.num_layers):
            kind = decoder_kind(arch, i)
            if kind not in out:
                out[kind] = general_decoder_cost(
                    arch, i, x, gpu=gpu, eff=efficiency, ep=ep, etp=etp, routing=routing
                )
    out[HEAD] = _head_cost(x, fam, gpu, efficiency)
    return out


def analytic_work(
    arch: ModelArch,
    *,
    gpu: GpuSpec,
    dtype: str,
    seq_length: int,
    micro_batch_size: int,
    tp: int,
    sequence_parallel: bool,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    routing: RoutingTerms = DEFAULT_ROUTING,
    ring: RingAttention = MEGATRON_CORE,
) -> dict[str, LayerWork]:
    """The named parts (GEMMs by kind, attention, element-wise) behind `analytic_costs`'
    times, per layer kind: what bench/cost_breakdown.py shows."""
    x = _shape(
        arch,
        dtype=dtype,
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        tp=tp,
        sequence_parallel=sequence_parallel,
        cp=cp,
        ring=ring,
    )
    fam = arch.family
    out = {EMBEDDING: embedding_work(x, fam, gpu, efficiency)}
    if arch.is_plain:
        out[DECODER] = decoder_work(x, fam, gpu, efficiency)
    else:
        for i in range(arch.num_layers):
            kind = decoder_kind(arch, i)
            if kind not in out:
                out[kind] = general_decoder_work(
                    arch, i, x, gpu=gpu, eff=efficiency, ep=ep, etp=etp, routing=routing
                )
    out[HEAD] = head_work(x, fam, gpu, efficiency)
    return out


def analytic_expert_floors(
    arch: ModelArch,
    *,
    gpu: GpuSpec,
    dtype: str,
    seq_length: int,
    micro_batch_size: int,
    tp: int,
    sequence_parallel: bool,
    cp: int = 1,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    routing: RoutingTerms = DEFAULT_ROUTING,
    ring: RingAttention = MEGATRON_CORE,
) -> dict[str, tuple[float, float, float]]:
    """Per MoE decoder kind of `arch`: (fw_s, bw_input_s, bw_weight_s) at or below
    `analytic_costs`' for that kind at every (ep, etp) of this point
    (decoder_kinds.general_decoder_floor_work). The other kinds do not read ep or etp."""
    x = _shape(
        arch,
        dtype=dtype,
        seq_length=seq_length,
        micro_batch_size=micro_batch_size,
        tp=tp,
        sequence_parallel=sequence_parallel,
        cp=cp,
        ring=ring,
    )
    out: dict[str, tuple[float, float, float]] = {}
    for i in range(arch.num_layers):
        if not arch.is_moe_layer(i):
            continue
        kind = decoder_kind(arch, i)
        if kind not in out:
            work = general_decoder_floor_work(arch, i, x, gpu=gpu, eff=efficiency, routing=routing)
            out[kind] = (work.fw_s, work.bw_input_s, work.bw_weight_s)
    return out


def analytic_profile(
    arch: ModelArch,
    cluster: ClusterSpec,
    training: TrainingSpec,
    points: Iterable[tuple[int, int, bool]],
    *,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> ModelProfile:
    """A ModelProfile of `arch` at each (micro_batch_size, tp, sequence_parallel) point."""
    gpu = cluster.device
    pts = tuple(
        ProfilePoint(
            micro_batch_size=mbs,
            tp=tp,
            sequence_parallel=sp,
            kinds=analytic_costs(
                arch,
                gpu=gpu,
                dtype=training.dtype,
                seq_length=training.seq_length,
                micro_batch_size=mbs,
                tp=tp,
                sequence_parallel=sp,
                efficiency=efficiency,
            ),
        )
        for mbs, tp, sp in dict.fromkeys(points)
    )
    return ModelProfile(
        name=arch.display_name,
        source="analytic",
        dtype=training.dtype,
        device_name=gpu.name,
        seq_length=training.seq_length,
        layers=layer_refs(arch),
        points=pts,
        arch=arch,
        notes={"efficiency": (", ".join(f"{k}={v}" for k, v in efficiency.as_dict().items()))},
    )


def _preset(**fields: object) -> ModelArch:
    return ModelArch.model_validate(fields)


#: Mixture-of-experts presets from each model's public config.json (Hugging Face), as llama
#: blocks (RMSNorm, rotary, SwiGLU experts, untied embeddings). What the blocks approximate:
#: DeepSeek-V3's MLA by its projection shapes (`MlaSpec`), and its multi-token-prediction module
#: (14B more parameters in the checkpoint) is left out, as in the published 671B; GPT-OSS's
#: attention biases and sinks, expert biases and clamped SwiGLU are left out (0.04 % of its
#: parameters) and its YaRN rotary is plain rotary (no cost difference).
PRESETS: dict[str, ModelArch] = {
    # huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (Jiang et al. 2024)
    "mixtral-8x7b": _preset(
        family="llama", name="mixtral-8x7b", num_layers=32, hidden_size=4096,
        num_attention_heads=32, num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000,
        moe={"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 14336},
    ),
    # huggingface.co/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json
    "mixtral-8x22b": _preset(
        family="llama", name="mixtral-8x22b", num_layers=56, hidden_size=6144,
        num_attention_heads=48, num_kv_heads=8, ffn_hidden_size=16384, vocab_size=32000,
        moe={"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 16384},
    ),
    # huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (Qwen3 technical report, 2025)
    "qwen3-30b-a3b": _preset(
        family="llama", name="qwen3-30b-a3b", num_layers=48, hidden_size=2048,
        num_attention_heads=32, num_kv_heads=4, head_dim=128, ffn_hidden_size=6144,
        vocab_size=151936,
        moe={"num_experts": 128, "experts_per_token": 8, "moe_ffn_hidden_size": 768},
    ),
    # huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json
    "qwen3-235b-a22b": _preset(
        family="llama", name="qwen3-235b-a22b", num_layers=94, hidden_size=4096,
        num_attention_heads=64, num_kv_heads=4, head_dim=128, ffn_hidden_size=12288,
        vocab_size=151936,
        moe={"num_experts": 128, "experts_per_token": 8, "moe_ffn_hidden_size": 1536},
    ),
    # huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (DeepSeek-V3 report §2,
    # §4.2): 3 dense layers, then 58 MoE layers of 1 shared + 256 routed experts, top-8,
    # sigmoid gating with the auxiliary-loss-free bias.
    "deepseek-v3": _preset(
        family="llama", name="deepseek-v3", num_layers=61, hidden_size=7168,
        num_attention_heads=128, ffn_hidden_size=18432, vocab_size=129280,
        mla={"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
             "qk_rope_head_dim": 64, "v_head_dim": 128},
        moe={"num_experts": 256, "experts_per_token": 8, "moe_ffn_hidden_size": 2048,
             "num_shared_experts": 1, "first_dense_layers": 3, "router": "sigmoid",
             "aux_loss_free": True},
    ),
    # huggingface.co/openai/gpt-oss-120b/blob/main/config.json (gpt-oss model card, 2025):
    # layers alternate sliding (128 tokens, even layers) and full attention.
    "gpt-oss-120b": _preset(
        family="llama", name="gpt-oss-120b", num_layers=36, hidden_size=2880,
        num_attention_heads=64, num_kv_heads=8, head_dim=64, ffn_hidden_size=2880,
        vocab_size=201088,
        moe={"num_experts": 128, "experts_per_token": 4, "moe_ffn_hidden_size": 2880},
        sliding_window={"window": 128, "full_every": 2},
    ),
}  # fmt: skip
