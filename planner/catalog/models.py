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
Times come from `planner.catalog.efficiency` (two calibrated constants).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.catalog.efficiency import DEFAULT_EFFICIENCY, Efficiency
from planner.catalog.hardware import GpuSpec
from planner.specs.base import DTYPE_BYTES, ModeValues
from planner.specs.cluster import ClusterSpec
from planner.specs.model import LayerCost, LayerRef, ModelArch, ModelProfile, ProfilePoint
from planner.specs.training import TrainingSpec

EMBEDDING, DECODER, HEAD = "embedding", "decoder", "head"


def layer_refs(arch: ModelArch) -> tuple[LayerRef, ...]:
    blocks = tuple(LayerRef(name=f"decoder.{i}", kind=DECODER) for i in range(arch.num_layers))
    return (LayerRef(name="embedding", kind=EMBEDDING), *blocks, LayerRef(name="head", kind=HEAD))


@dataclass(frozen=True)
class _Shape:
    """The numbers every formula below needs, for one (arch, s, b, t, sp, dtype)."""

    s: int
    b: int
    h: int
    a: int
    r: float  # kv heads / heads
    f: int
    v: int
    t: int
    q: int  # divisor of the replicated (sequence-dim) parts: t with sequence parallel, else 1
    d: int  # bytes per activation element

    @property
    def e(self) -> float:
        """Elements of one s x b x h activation."""
        return float(self.s * self.b * self.h)

    @property
    def sbf(self) -> float:
        return float(self.s * self.b * self.f)

    @property
    def scores(self) -> float:
        """Elements of the attention scores a x s x s x b (the s^2 part)."""
        return float(self.a * self.s * self.s * self.b)


@dataclass(frozen=True)
class _Work:
    """Forward work of one layer on one tp rank, split into the attention core and the rest."""

    linear_flops: float
    core_flops: float
    linear_mem_bytes: float
    core_mem_bytes: float


def _decoder_flops(x: _Shape, swiglu: bool) -> tuple[float, float]:
    """(linear, core) forward FLOPs of one decoder layer on one tp rank.

    Narayanan et al. 2021 §5.1 / Korthikanti et al. 2022 §6: a GPT layer's forward is
    24*s*b*h^2 + 4*s^2*b*h: QKV 6sbh^2, output projection 2sbh^2, MLP 16sbh^2 (f = 4h), and the
    attention core Q K^T and scores x V, 2*s^2*b*h each. Generalised: QKV is 2sbh*h(1 + 2r) with
    grouped-query attention; SwiGLU has three h x f matmuls (gate, up, down) = 6sbhf, GELU two
    = 4sbhf. Megatron splits every matmul over the t ranks.
    """
    mlp = (6.0 if swiglu else 4.0) * x.e * x.f
    attn_linear = 2.0 * x.e * x.h * (1.0 + 2.0 * x.r) + 2.0 * x.e * x.h
    core = 4.0 * x.s * x.e
    return (attn_linear + mlp) / x.t, core / x.t


def _decoder_work(x: _Shape, family: str) -> _Work:
    """FLOPs and memory-bound bytes of one decoder layer's forward.

    Memory-bound bytes: each element-wise kernel reads its inputs and writes its output once
    (the kernels and fusions of Megatron-LM 2021 for gpt; masks are 1 byte):
      gpt   replicated: LN x2 (2e*d each), bias-dropout-add x2 (3e*d + e mask each)
            sharded:    bias + GELU (read and write s*b*f)
            core:       scaled masked softmax (2*a*s^2*b*d), dropout (2*a*s^2*b*d + mask)
      llama replicated: RMSNorm x2 (2e*d each), residual add x2 (3e*d each)
            sharded:    rotary on Q, K (2(1+r)e*d), the fused attention kernel's reads of Q, K, V
                        and write of O ((2+2r)e*d), SwiGLU (3*s*b*f*d)
            core:       none (the flash kernel keeps the scores on chip; its FLOPs count as matmul)
    """
    linear, core = _decoder_flops(x, swiglu=family == "llama")
    d, e = x.d, x.e
    if family == "gpt":
        rep = 10.0 * e * d + 2.0 * e
        shard = 2.0 * x.sbf * d
        core_mem = (4.0 * d + 1.0) * x.scores
    else:
        rep = 10.0 * e * d
        shard = 2.0 * (1.0 + x.r) * e * d + (2.0 + 2.0 * x.r) * e * d + 3.0 * x.sbf * d
        core_mem = 0.0
    return _Work(
        linear_flops=linear,
        core_flops=core,
        linear_mem_bytes=rep / x.q + shard / x.t,
        core_mem_bytes=core_mem / x.t,
    )


def _decoder_activations(x: _Shape, family: str) -> ModeValues:
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
    else:
        rep = 4.0 * e * d
        shard = (2.0 + 2.0 * x.r) * e * d + 4.0 * x.s * x.b * x.a + 3.0 * x.sbf * d
        core = 0.0
    selective = rep / x.q + shard / x.t
    return ModeValues(none=selective + core / x.t, selective=selective, full=e * d / x.q)


def _decoder_params(x: _Shape, family: str) -> float:
    """Parameters of one decoder layer held by one tp rank.

    gpt: 12h^2 + 13h for f = 4h (Narayanan 2021, Eq. 2): QKV and projection h^2(2 + 2r), MLP
    2hf, column-parallel biases h(1 + 2r) + f (split by t), projection and fc2 biases and two
    LayerNorms 6h (replicated). llama: h^2(2 + 2r) + 3hf split by t, two RMSNorm weights 2h.
    """
    h, f, r, t = x.h, x.f, x.r, x.t
    if family == "gpt":
        return (h * h * (2 + 2 * r) + 2 * h * f + h * (1 + 2 * r) + f) / t + 6 * h
    return (h * h * (2 + 2 * r) + 3 * h * f) / t + 2 * h


def _decoder_cost(x: _Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    w = _decoder_work(x, family)
    fw_s = eff.time_s(
        flops=w.linear_flops + w.core_flops,
        num_bytes=w.linear_mem_bytes + w.core_mem_bytes,
        gpu=gpu,
    )
    # Backward = 2 x forward FLOPs; split per Qi et al. 2024 Table 1: input gradient
    # B = sbh(24h + 8s) (linear once, core twice), weight gradient W = 24sbh^2 (linear only).
    # The memory-bound element-wise backward (twice the forward's bytes) goes with B.
    bw_input_s = eff.time_s(
        flops=w.linear_flops + 2.0 * w.core_flops,
        num_bytes=2.0 * (w.linear_mem_bytes + w.core_mem_bytes),
        gpu=gpu,
    )
    bw_weight_s = eff.matmul_s(w.linear_flops, gpu)
    # Recompute: selective re-runs the attention core (Korthikanti 2022 §5), full the forward.
    selective_s = eff.time_s(flops=w.core_flops, num_bytes=w.core_mem_bytes, gpu=gpu)
    if family == "llama":
        selective_s = 0.0  # the fused attention kernel already recomputes the core itself
    params = _decoder_params(x, family)
    return LayerCost(
        fw_s=fw_s,
        bw_input_s=bw_input_s,
        bw_weight_s=bw_weight_s,
        recompute_s=ModeValues(none=0.0, selective=selective_s, full=fw_s),
        activation_bytes=_decoder_activations(x, family),
        param_bytes=params * x.d,
        param_count=params,
        output_bytes=x.e * x.d / x.q,
        # Megatron: 2 all-reduces of b*s*h in the forward and 2 in the backward per layer
        # (Shoeybi et al. 2019, Fig. 4); sequence parallel: all-gather + reduce-scatter of the
        # same volume (Korthikanti 2022 §4.2.2).
        tp_comm_bytes=4.0 * x.e * x.d if x.t > 1 else 0.0,
        fw_flops=w.linear_flops + w.core_flops,
    )


def _constant_modes(value: float) -> ModeValues:
    return ModeValues(none=value, selective=value, full=value)


def _embedding_cost(x: _Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    """Token (vocab-parallel, V*h/t) + learned position (gpt, s*h replicated) embeddings.

    No matmul FLOPs. Memory-bound forward: gather (read + write e*d), gpt also the position add
    (3e*d) and dropout (2e*d + mask). The backward (a scatter-add into the embedding gradient)
    is taken as the forward's bytes, all of it weight gradient. Saved: gpt's dropout mask
    (Korthikanti 2022 §4.3: s*b*h/t with sequence parallel).
    """
    d, e = x.d, x.e
    mem = (7.0 * e * d + e) / x.q if family == "gpt" else 2.0 * e * d / x.q
    saved = e / x.q if family == "gpt" else 0.0
    params = x.v * x.h / x.t + (x.s * x.h if family == "gpt" else 0)
    return LayerCost(
        fw_s=eff.memory_s(mem, gpu),
        bw_input_s=0.0,
        bw_weight_s=eff.memory_s(mem, gpu),
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


def _head_cost(x: _Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerCost:
    """Final norm + output projection (h x V/t) + vocab-parallel cross-entropy.

    FLOPs: 2*s*b*h*V/t forward (the V/(16Lh) term of Narayanan 2021 Eq. 3), the same again for
    the input gradient and for the weight gradient. Memory-bound: the norm (2e*d/q) and three
    passes over the fp32 logits (cast, max/sum, softmax: 12*s*b*V/t), the same in backward.
    Saved (Korthikanti 2022 §4.3): norm and projection inputs 2e*d/q and the fp32 logits
    4*s*b*V/t. Never recomputed. With tied embeddings (gpt) the head holds its own copy of the
    word embeddings (Megatron keeps it on the last stage and all-reduces the two gradients);
    the cost model drops that copy when embedding and head sit on the same pipeline rank.
    """
    d, e = x.d, x.e
    flops = 2.0 * e * x.v / x.t
    logits = 4.0 * x.s * x.b * x.v / x.t
    mem = 2.0 * e * d / x.q + 3.0 * logits
    norm_params = 2 * x.h if family == "gpt" else x.h
    params = x.v * x.h / x.t + norm_params
    return LayerCost(
        fw_s=eff.time_s(flops=flops, num_bytes=mem, gpu=gpu),
        bw_input_s=eff.time_s(flops=flops, num_bytes=mem, gpu=gpu),
        bw_weight_s=eff.matmul_s(flops, gpu),
        recompute_s=_constant_modes(0.0),
        activation_bytes=_constant_modes(2.0 * e * d / x.q + logits),
        param_bytes=params * x.d,
        param_count=params,
        output_bytes=4.0 * x.s * x.b,  # per-token fp32 losses
        # input identity/all-gather in the forward, all-reduce/reduce-scatter of the input
        # gradient in the backward, plus cross-entropy's three fp32 all-reduces of s*b.
        tp_comm_bytes=2.0 * e * d + 3.0 * 4.0 * x.s * x.b if x.t > 1 else 0.0,
        fw_flops=flops,
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
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> dict[str, LayerCost]:
    """Costs of the `embedding`, `decoder` and `head` kinds of `arch` on one tp rank.

    Times exclude TP communication (the cost model adds it from `tp_comm_bytes` on the link the
    TP group sits on). Raises ValueError if tp does not divide the heads and kv heads.
    """
    a, kv = arch.num_attention_heads, arch.kv_heads
    if tp <= 0 or a % tp or kv % tp:
        raise ValueError(f"tp={tp} must divide num_attention_heads={a} and num_kv_heads={kv}")
    if sequence_parallel and tp == 1:
        raise ValueError("sequence_parallel needs tp > 1")
    x = _Shape(
        s=seq_length,
        b=micro_batch_size,
        h=arch.hidden_size,
        a=a,
        r=kv / a,
        f=arch.ffn,
        v=arch.vocab_size,
        t=tp,
        q=tp if sequence_parallel else 1,
        d=DTYPE_BYTES[dtype],
    )
    fam = arch.family
    return {
        EMBEDDING: _embedding_cost(x, fam, gpu, efficiency),
        DECODER: _decoder_cost(x, fam, gpu, efficiency),
        HEAD: _head_cost(x, fam, gpu, efficiency),
    }


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
        notes={
            "efficiency": (
                f"matmul_fraction={efficiency.matmul_fraction}, "
                f"hbm_fraction={efficiency.hbm_fraction}"
            )
        },
    )
