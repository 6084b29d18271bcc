"""Analytic per-layer numbers of mixture-of-experts, latent-attention and windowed models.

What one decoder layer of a `ModelArch` with `moe`, `mla`, `head_dim` or `sliding_window`
costs on one device without parallelism: forward model FLOPs split into attention projections,
attention core, router, routed experts and shared experts (or the dense MLP), the parameters
split into dense and expert parameters, and the bytes saved for backward per recompute mode.
How the parallel degrees divide them (attention over tp x cp x dp x pp, experts over
etp x ep x edp x pp) is in docs/moe.md; the search and cost model apply it.

Symbols: T = b * s tokens of a micro-batch, h hidden, a heads, g kv heads, dq / dv the
query-key and value head sizes (head_dim, or MLA's nope + rope and v), E routed experts, k
experts per token, f_e the expert FFN width, n_s shared experts, m = 3 matrices per MLP for
SwiGLU (llama) or 2 for GELU (gpt), d bytes per activation element.

Conventions (sources):
- A GEMM of (M x K) by (K x N) is 2MKN FLOPs; the backward is twice the forward (input and
  weight gradients; Narayanan et al. 2021 §5.1).
- Attention core: Q K^T and P V, 2 * T * a * keys * (dq + dv) FLOPs where `keys` is s for a
  full layer (the causal mask's skipped half is still counted, the MFU convention of
  planner.catalog.layer_work) and min(s, window) for a sliding-window layer.
- Router: one h x E linear, 2 * T * h * E (Switch Transformer, Fedus et al. 2021 §2.1);
  its softmax / sigmoid and top-k are element-wise and not counted.
- Routed experts: a grouped GEMM per expert matrix; with balanced routing every expert gets
  T * k / E rows (GShard, Lepikhin et al. 2020 §2.2; Megatron-Core MoE, "grouped GEMM"), so
  all experts together do 2 * m * T * k * h * f_e. A capacity factor c keeps at most
  ceil(c * T * k / E) rows per expert: balanced routing drops tokens only when c < 1. The
  kept rows are counted, not the padding of Megatron-Core's
  `--moe-pad-expert-input-to-capacity`.
- Shared experts (DeepSeekMoE, Dai et al. 2024 §3.2): every token, 2 * m * T * n_s * h * f_e.
- MLA (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1): the projections h -> q_lora -> a (dq),
  h -> kv_lora + rope, kv_lora -> a (nope + dv), a dv -> h, as GEMMs of those shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.specs.base import ModeValues
from planner.specs.model import ModelArch

__all__ = [
    "LayerFlops",
    "ParamCounts",
    "attention_matrix_params",
    "attention_params",
    "cp_ring_bytes",
    "ep_all_to_all_bytes",
    "expert_rows",
    "layer_activation_bytes",
    "layer_flops",
    "mlp_params",
    "param_counts",
    "qk_v_head_dims",
]


def qk_v_head_dims(arch: ModelArch) -> tuple[int, int]:
    """(query-key, value) head sizes: MLA's nope + rope and v, else `head_size` for both."""
    if arch.mla is not None:
        m = arch.mla
        return m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    return arch.head_size, arch.head_size


def attention_params(arch: ModelArch) -> int:
    """Parameters of one layer's attention, including its input norm.

    Standard: q (h x a dq), k and v (h x g dq each), o (a dv x h); gpt adds the biases of q,
    k, v, o and LayerNorm's bias. MLA: q_a (h x q_lora) + its RMSNorm + q_b (q_lora x a dq), or
    q (h x a dq) without q_lora; kv_a (h x (kv_lora + rope)) + its RMSNorm; kv_b (kv_lora x
    a (nope + dv)); o (a dv x h) (DeepSeek-V3's config.json shapes).
    """
    h, a, g = arch.hidden_size, arch.num_attention_heads, arch.kv_heads
    dq, _ = qk_v_head_dims(arch)
    norm = 2 * h if arch.family == "gpt" else h
    if arch.mla is not None:
        norm += (arch.mla.q_lora_rank or 0) + arch.mla.kv_lora_rank
    bias = a * dq + 2 * g * dq + h if arch.family == "gpt" else 0
    return attention_matrix_params(arch) + bias + norm


def attention_matrix_params(arch: ModelArch) -> int:
    """The weight matrices of `attention_params` (without norms and biases)."""
    h, a, g = arch.hidden_size, arch.num_attention_heads, arch.kv_heads
    dq, dv = qk_v_head_dims(arch)
    if arch.mla is not None:
        m = arch.mla
        q = h * a * dq if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * a * dq
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
        kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + dv)
        return q + kv + a * dv * h
    return h * (a * dq + 2 * g * dq) + a * dv * h


def mlp_params(arch: ModelArch, ffn: int) -> int:
    """One MLP of width `ffn` (a dense MLP or one expert), without its norm: SwiGLU 3hf
    (llama), GELU 2hf plus biases f + h (gpt)."""
    h = arch.hidden_size
    if arch.family == "llama":
        return 3 * h * ffn
    return 2 * h * ffn + ffn + h


def _matrices(arch: ModelArch) -> int:
    return 3 if arch.family == "llama" else 2


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of a model, split as expert parallelism shards them.

    `dense`: every decoder parameter outside the routed experts (attention, norms, dense MLPs,
    routers, shared experts), replicated over ep. `expert`: the routed experts of all MoE layers
    (sharded over ep, Megatron-Core's expert parallel). `expert_active`: what one token uses of
    them (k of E per MoE layer). `embedding` and `head`: the input embedding and the output
    projection with the final norm (one matrix when tied).
    """

    embedding: int
    head: int
    dense: int
    expert: int
    expert_active: int

    @property
    def total(self) -> int:
        return self.embedding + self.head + self.dense + self.expert

    @property
    def active(self) -> int:
        """Parameters one token's forward uses (embedding rows counted whole, as published
        active counts do)."""
        return self.embedding + self.head + self.dense + self.expert_active


def param_counts(arch: ModelArch) -> ParamCounts:
    """The parameter counts of `arch` (see ParamCounts)."""
    h = arch.hidden_size
    attn = attention_params(arch)
    mlp_norm = 2 * h if arch.family == "gpt" else h
    dense = expert = active = 0
    for i in range(arch.num_layers):
        dense += attn + mlp_norm
        moe = arch.moe
        if moe is None or not moe.is_moe_layer(i):
            dense += mlp_params(arch, arch.ffn)
            continue
        one = mlp_params(arch, moe.moe_ffn_hidden_size)
        # router and shared experts; an aux-loss-free router's per-expert bias (DeepSeek-V3
        # §2.1.2) is set by a rule, not trained: a buffer, like the reference model's
        dense += h * moe.num_experts + moe.num_shared_experts * one
        expert += moe.num_experts * one
        active += moe.experts_per_token * one
    embedding = arch.vocab_size * h  # gpt's learned positions (s x h) depend on the run
    head_norm = 2 * h if arch.family == "gpt" else h
    head = head_norm + (0 if arch.tied else arch.vocab_size * h)
    return ParamCounts(
        embedding=embedding, head=head, dense=dense, expert=expert, expert_active=active
    )


def expert_rows(arch: ModelArch, tokens: int) -> float:
    """Rows each routed expert's GEMMs process for `tokens` tokens under balanced routing:
    T * k / E dropless; min(that, ceil(c * T * k / E)) with a capacity factor c."""
    moe = arch.moe
    if moe is None:
        raise ValueError(f"{arch.display_name}: expert_rows needs an MoE model (moe=None)")
    rows = tokens * moe.experts_per_token / moe.num_experts
    if moe.capacity_factor is None:
        return rows
    return min(rows, float(math.ceil(moe.capacity_factor * rows)))


@dataclass(frozen=True)
class LayerFlops:
    """Forward model FLOPs of one decoder layer; the backward is `2 * total`."""

    attention_linear: float
    attention_core: float
    router: float
    experts: float
    shared_experts: float
    dense_mlp: float

    @property
    def total(self) -> float:
        return (
            self.attention_linear
            + self.attention_core
            + self.router
            + self.experts
            + self.shared_experts
            + self.dense_mlp
        )

    @property
    def backward(self) -> float:
        return 2.0 * self.total


def _attention_keys(arch: ModelArch, index: int, seq_length: int) -> int:
    sw = arch.sliding_window
    if sw is not None and sw.is_sliding(index):
        return min(seq_length, sw.window)
    return seq_length


def layer_flops(
    arch: ModelArch, index: int, *, micro_batch_size: int, seq_length: int
) -> LayerFlops:
    """Forward FLOPs of decoder layer `index` for one micro-batch (module docstring)."""
    tokens = micro_batch_size * seq_length
    h, a = arch.hidden_size, arch.num_attention_heads
    dq, dv = qk_v_head_dims(arch)
    linear = 2.0 * tokens * attention_matrix_params(arch)
    keys = _attention_keys(arch, index, seq_length)
    core = 2.0 * tokens * a * keys * (dq + dv)
    m = _matrices(arch)
    moe = arch.moe
    if moe is None or not moe.is_moe_layer(index):
        dense = 2.0 * m * tokens * h * arch.ffn
        return LayerFlops(linear, core, 0.0, 0.0, 0.0, dense)
    f = moe.moe_ffn_hidden_size
    routed = 2.0 * m * moe.num_experts * expert_rows(arch, tokens) * h * f
    return LayerFlops(
        attention_linear=linear,
        attention_core=core,
        router=2.0 * tokens * h * moe.num_experts,
        experts=routed,
        shared_experts=2.0 * m * tokens * moe.num_shared_experts * h * f,
        dense_mlp=0.0,
    )


def layer_activation_bytes(
    arch: ModelArch, index: int, *, micro_batch_size: int, seq_length: int, dtype_bytes: int
) -> ModeValues:
    """Bytes decoder layer `index` saves for backward, one device, per recompute mode.

    Attention (a fused flash core, Korthikanti et al. 2022 §4.1 adapted as in
    planner.catalog.models for llama): norm input and QKV input 2Td, Q (T a dq d), K and V
    (T g (dq + dv) d, for MLA the decompressed a heads), the output projection input
    (T a dv d) and fp32 log-sum-exp 4Ta; MLA adds its two latents (T (q_lora + kv_lora) d).
    gpt adds the score core (2d + 1) a s keys b (softmax output, dropout mask and output),
    which selective recompute drops.
    Dense MLP: its norm input Td, then SwiGLU gate, up and down input 3 T f d (GELU: fc1 input,
    GELU input and fc2 input T(h + 2f) d).
    MoE MLP: norm input and router input 2Td, fp32 routing probabilities 4 T E, the permuted
    tokens (expert fc1 input) T k h d, the experts' inner activations as a dense MLP of
    T k rows, the expert outputs before the weighted combine T k h d, and the shared experts
    as a dense MLP of T n_s rows (Megatron-Core MoE's token dispatcher keeps the permuted
    input and the unpermute's input; its finer `--recompute-modules` are not modelled).
    Full recompute keeps the layer input, T h d.
    """
    d = float(dtype_bytes)
    s, b = seq_length, micro_batch_size
    tokens = float(s * b)
    h, a, g = arch.hidden_size, arch.num_attention_heads, arch.kv_heads
    dq, dv = qk_v_head_dims(arch)
    kv_heads = a if arch.mla is not None else g
    attn = 2 * tokens * h * d + tokens * a * dq * d + tokens * kv_heads * (dq + dv) * d
    attn += tokens * a * dv * d + 4.0 * tokens * a
    if arch.mla is not None:
        attn += tokens * ((arch.mla.q_lora_rank or 0) + arch.mla.kv_lora_rank) * d
    core = 0.0
    if arch.family == "gpt":
        core = (2.0 * d + 1.0) * a * s * b * _attention_keys(arch, index, s)

    def dense_mlp(rows: float, ffn: int) -> float:
        if arch.family == "llama":
            return 3.0 * rows * ffn * d
        return rows * (h + 2.0 * ffn) * d

    moe = arch.moe
    if moe is None or not moe.is_moe_layer(index):
        mlp = tokens * h * d + dense_mlp(tokens, arch.ffn)
    else:
        routed_rows = expert_rows(arch, int(tokens)) * moe.num_experts
        f = moe.moe_ffn_hidden_size
        mlp = 2.0 * tokens * h * d + 4.0 * tokens * moe.num_experts
        mlp += 2.0 * routed_rows * h * d + dense_mlp(routed_rows, f)
        mlp += dense_mlp(tokens * moe.num_shared_experts, f)
    selective = attn + mlp
    return ModeValues(none=selective + core, selective=selective, full=tokens * h * d)


def ep_all_to_all_bytes(arch: ModelArch, *, tokens: int, ep: int, dtype_bytes: int) -> float:
    """Bytes one rank sends to the other ranks of its ep group in one all-to-all of an MoE
    layer: its T x k token copies of h elements, of which (ep - 1) / ep leave the rank under
    balanced routing. An MoE layer does four per micro-batch: dispatch and combine in the
    forward, and their reverses in the backward (Megatron-Core's alltoall token dispatcher).
    """
    moe = arch.moe
    if moe is None:
        raise ValueError(f"{arch.display_name}: ep_all_to_all_bytes needs an MoE model")
    if ep < 1:
        raise ValueError(f"ep={ep} must be >= 1")
    copies = tokens * moe.experts_per_token
    return copies * arch.hidden_size * dtype_bytes * (ep - 1) / ep


def cp_ring_bytes(arch: ModelArch, *, local_tokens: int, cp: int, dtype_bytes: int) -> float:
    """Bytes one rank sends per attention layer in the forward's K/V ring: cp - 1 steps of its
    keys and values, local_tokens x (g x d_qk + g x d_v) elements (MLA: every head's
    decompressed keys and values, a x (d_qk + d_v)). The backward sends the keys and values
    again and their gradients (twice the forward; Megatron-Core's ring context parallel)."""
    if cp < 1:
        raise ValueError(f"cp={cp} must be >= 1")
    dq, dv = qk_v_head_dims(arch)
    heads = arch.num_attention_heads if arch.mla is not None else arch.kv_heads
    return (cp - 1) * local_tokens * heads * (dq + dv) * dtype_bytes
