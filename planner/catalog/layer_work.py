"""The kernels of one layer on one tp rank, and their times: the analytic families' work.

A layer's forward, input-gradient and weight-gradient times are sums over named parts
(`Part`): each GEMM (`gemm.qkv`, `gemm.attn_out`, `gemm.mlp_in`, `gemm.mlp_out`,
`gemm.lm_head`), the attention core (`attention`) and the memory-bound element-wise kernels
(`elementwise`). `planner.catalog.models` sums them into a LayerCost; `bench/cost_breakdown.py`
shows them. Times come from planner.catalog.kernels (shape -> seconds).

Shapes as each tp rank sees them (Shoeybi et al. 2019 §3: column-parallel QKV and MLP-in,
row-parallel attention-out and MLP-out), T = s*b tokens (all T even with sequence parallel,
whose all-gather restores the full sequence before each GEMM, Korthikanti 2022 §4.2.2):

    gemm.qkv       [T, h] x [h, (h + 2*kv*h/a)/t]       (grouped-query: kv heads of K and V)
    gemm.attn_out  [T, h/t] x [h/t, h]
    gemm.mlp_in    [T, h] x [h, f/t]    gpt (GELU fc1); llama: [h, 2f/t] (gate and up fused,
                                        Megatron-core's linear_fc1 for gated linear units)
    gemm.mlp_out   [T, f/t] x [f/t, h]
    gemm.lm_head   [T, h] x [h, V/t]
With context parallelism T = s*b/cp (the rank's 2 of 2cp chunks) and the core is the
rank's s/cp queries over all s keys; with `head_dim` or MLA the heads are dq / dv wide
(planner.catalog.moe_work's MLA projections replace QKV); an MoE layer adds the router and
the grouped expert GEMMs (planner.catalog.moe_work) after its shared experts' MLP.
Backward of each: the input gradient (dgrad, [T, N] x [N, K]) and the weight gradient
(wgrad, [K, T] x [T, N]); the FLOPs are twice the forward's (Qi et al. 2024, Table 1: B takes
the dgrads and the attention core's backward, W the wgrads).

Attention core per rank, a/t heads of d_h = h/a:
- gpt (Megatron 2021, unfused): batched Q K^T [s, d_h] x [d_h, s] and P V [s, s] x [s, d_h],
  b*a/t of each; backward dQ, dK, dP, dV (four batched GEMMs, twice the forward FLOPs);
  the scaled masked softmax and dropout are element-wise over a*s^2*b/t scores.
- llama: one fused causal FlashAttention-2 kernel (planner.catalog.kernels.flash_attention_s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec
from planner.catalog.kernels import Gemm, elementwise_s, flash_attention_s, gemm_s
from planner.catalog.ring_attention import MEGATRON_CORE, RingAttention

GEMM_KINDS = ("gemm.qkv", "gemm.attn_out", "gemm.mlp_in", "gemm.mlp_out", "gemm.lm_head")
PART_KINDS = (*GEMM_KINDS, "attention", "elementwise")


@dataclass(frozen=True)
class Shape:
    """The numbers every formula needs, for one (arch, s, b, t, sp, dtype)."""

    s: int
    b: int
    h: int
    a: int
    kv: int  # kv heads
    f: int
    v: int
    t: int
    q: int  # divisor of the replicated (sequence-dim) parts: t with sequence parallel, else 1
    d: int  # bytes per activation element
    c: int = 1  # context parallel: a rank holds s / c tokens of every sequence
    fused: bool = False  # gpt's core as one flash kernel (llama's always is; needed by c > 1)
    dq: int = 0  # query-key head size (0: h / a)
    dv: int = 0  # value head size (0: the query-key one)
    window: int = 0  # keys a sliding-window layer's query attends (0: a full layer)
    attn_weights: int = 0  # attention projection weights when not q, k, v, o (MLA), else 0
    ring: RingAttention = MEGATRON_CORE  # the framework's context-parallel implementation

    @property
    def r(self) -> float:
        return self.kv / self.a

    @property
    def sl(self) -> int:
        """Tokens of one sequence on this rank: s / cp (2 of the 2 cp chunks)."""
        return self.s // self.c

    @property
    def e(self) -> float:
        """Elements of one (s / cp) x b x h activation: the rank's share of the sequence."""
        return float(self.sl * self.b * self.h)

    @property
    def sbf(self) -> float:
        return float(self.sl * self.b * self.f)

    @property
    def scores(self) -> float:
        """Elements of the attention scores a x s x s x b (the s^2 part; unfused core, cp 1)."""
        return float(self.a * self.s * self.s * self.b)

    @property
    def tokens(self) -> int:
        return self.sl * self.b

    @property
    def head_dim(self) -> int:
        """Query-key head size: `dq`, else h / a."""
        return self.dq or max(1, self.h // self.a)

    @property
    def value_dim(self) -> int:
        return self.dv or self.head_dim

    @property
    def keys(self) -> int:
        """Keys a query of this layer attends: s, or the window of a sliding layer."""
        return min(self.s, self.window) if self.window else self.s

    @property
    def exchanged_kv_heads(self) -> int:
        """K / V heads a context-parallel ring moves (per tp rank: / t): the kv heads, or
        every query head where the framework repeats K and V first (RingAttention)."""
        return self.a if self.ring.exchange_all_heads else self.kv

    @property
    def cp_kv_bytes(self) -> float:
        """Bytes of the K and V one cp rank holds and a ring step sends (per tp rank)."""
        if self.c <= 1:
            return 0.0
        width = self.exchanged_kv_heads * (self.head_dim + self.value_dim)
        return self.tokens * width * self.d / self.t

    @property
    def standard_heads(self) -> bool:
        """Heads of h / a for queries, keys and values and full attention: the dense
        catalog's formulas apply unchanged."""
        return self.dq == 0 and self.dv == 0 and self.window == 0

    @property
    def fused_core(self) -> bool:
        """Whether gpt's attention core is a fused flash kernel (llama's always is):
        `ModelArch.attention_kernel`. Context parallelism needs it (Megatron-Core runs its
        ring attention through Transformer Engine's fused attention only), so c > 1 implies
        it (planner.catalog.models._shape checks)."""
        return self.fused


@dataclass(frozen=True)
class Part:
    """One named part of a layer: its forward, input-gradient and weight-gradient seconds,
    and whether selective recompute re-runs its forward."""

    kind: str
    fw_s: float
    bw_input_s: float
    bw_weight_s: float
    selective: bool = False


@dataclass(frozen=True)
class LayerWork:
    parts: tuple[Part, ...]

    @property
    def fw_s(self) -> float:
        return sum(p.fw_s for p in self.parts)

    @property
    def bw_input_s(self) -> float:
        return sum(p.bw_input_s for p in self.parts)

    @property
    def bw_weight_s(self) -> float:
        return sum(p.bw_weight_s for p in self.parts)

    @property
    def selective_s(self) -> float:
        """What selective recompute re-runs: the forward of the parts marked selective."""
        return sum(p.fw_s for p in self.parts if p.selective)


def decoder_flops(x: Shape, swiglu: bool) -> tuple[float, float]:
    """(linear, core) forward model FLOPs of one decoder layer on one tp rank.

    Narayanan et al. 2021 §5.1 / Korthikanti et al. 2022 §6: a GPT layer's forward is
    24*s*b*h^2 + 4*s^2*b*h: QKV 6sbh^2, output projection 2sbh^2, MLP 16sbh^2 (f = 4h), and the
    attention core Q K^T and scores x V, 2*s^2*b*h each. Generalised: QKV is 2sbh*h(1 + 2r) with
    grouped-query attention; SwiGLU has three h x f matmuls (gate, up, down) = 6sbhf, GELU two
    = 4sbhf. Megatron splits every matmul over the t ranks. (Model FLOPs: the causal mask's
    skipped half of a flash kernel is still counted, as MFU conventions do.)
    """
    mlp = (6.0 if swiglu else 4.0) * x.e * x.f
    if x.standard_heads and not x.attn_weights:
        attn_linear = 2.0 * x.e * x.h * (1.0 + 2.0 * x.r) + 2.0 * x.e * x.h
        core = 4.0 * x.s * x.e
        return (attn_linear + mlp) / x.t, core / x.t
    # general heads (planner.catalog.moe.layer_flops): projections 2T x their weights, the
    # core 2 T a keys (dq + dv), keys = s or a sliding layer's window. Under context
    # parallelism T is the rank's s / cp tokens and each attends over all s keys causally:
    # 1/cp of the full core (the balanced chunks, Megatron-Core's context parallel).
    dq, dv = x.head_dim, x.value_dim
    weights = x.attn_weights or x.h * (x.a * dq + 2 * x.kv * dq + x.a * dv)
    attn_linear = 2.0 * x.tokens * weights
    core = 2.0 * x.keys * x.tokens * x.a * (dq + dv)
    return (attn_linear + mlp) / x.t, core / x.t


def decoder_memory_bytes(x: Shape, family: str) -> tuple[float, float]:
    """(element-wise, attention-core element-wise) forward HBM bytes of one decoder layer.

    Each element-wise kernel reads its inputs and writes its output once (the kernels and
    fusions of Megatron-LM 2021 for gpt; masks are 1 byte):
      gpt   replicated: LN x2 (2e*d each), bias-dropout-add x2 (3e*d + e mask each)
            sharded:    bias + GELU (read and write s*b*f)
            core:       scaled masked softmax (2*a*s^2*b*d), dropout (2*a*s^2*b*d + mask)
      llama replicated: RMSNorm x2 (2e*d each), residual add x2 (3e*d each)
            sharded:    rotary on Q, K (2(1+r)e*d), SwiGLU (3*s*b*f*d)
            core:       none (the flash kernel keeps the scores on chip)
    """
    d, e = x.d, x.e
    if family == "gpt":
        rep = 10.0 * e * d + 2.0 * e
        shard = 2.0 * x.sbf * d
        core = 0.0 if x.fused_core else (4.0 * d + 1.0) * x.scores
    else:
        rep = 10.0 * e * d
        if x.standard_heads:
            rotary = 2.0 * (1.0 + x.r) * e * d
        else:
            rotary = 2.0 * x.tokens * (x.a + x.kv) * x.head_dim * d
        shard = rotary + 3.0 * x.sbf * d
        core = 0.0
    return rep / x.q + shard / x.t, core / x.t


# forward element-wise kernels per decoder layer (module docstring of decoder_memory_bytes)
_ELEMENTWISE_KERNELS = {"gpt": 5, "llama": 6}
_CORE_ELEMENTWISE_KERNELS = {"gpt": 2, "llama": 0}


def _gemm_part(kind: str, g: Gemm, gpu: GpuSpec, eff: Efficiency, d: int) -> Part:
    return Part(
        kind=kind,
        fw_s=gemm_s(g, gpu, eff, element_bytes=d),
        bw_input_s=gemm_s(g.dgrad, gpu, eff, element_bytes=d),
        bw_weight_s=gemm_s(g.wgrad, gpu, eff, element_bytes=d),
    )


def _ceil_div(a: int, b: int) -> int:
    return max(1, math.ceil(a / b))


def attention_gemms(x: Shape, gpu: GpuSpec, eff: Efficiency) -> list[Part]:
    """QKV (a dq + 2 g dq columns, split by t) and the output projection (a dv / t rows)."""
    d, t, tok = x.d, x.t, x.tokens
    if x.standard_heads:
        qkv_out, o_in = x.h + 2 * x.kv * x.head_dim, x.h
    else:
        qkv_out, o_in = x.a * x.head_dim + 2 * x.kv * x.head_dim, x.a * x.value_dim
    return [
        _gemm_part("gemm.qkv", Gemm(tok, _ceil_div(qkv_out, t), x.h), gpu, eff, d),
        _gemm_part("gemm.attn_out", Gemm(tok, x.h, _ceil_div(o_in, t)), gpu, eff, d),
    ]


def decoder_work(
    x: Shape,
    family: str,
    gpu: GpuSpec,
    eff: Efficiency,
    *,
    projections: list[Part] | None = None,
    experts: tuple[Part, ...] = (),
) -> LayerWork:
    """The parts of one decoder layer (module docstring). `projections` replaces the
    attention's QKV and output GEMMs (MLA's, planner.catalog.moe_work); `experts` are an MoE
    layer's router, routed experts and their element-wise kernels, after the dense MLP of
    width f (an MoE layer's shared experts; none when f = 0)."""
    d, t, tok = x.d, x.t, x.tokens
    mlp_in = 2 * x.f if family == "llama" else x.f
    parts = attention_gemms(x, gpu, eff) if projections is None else list(projections)
    if x.f > 0:
        parts += [
            _gemm_part("gemm.mlp_in", Gemm(tok, _ceil_div(mlp_in, t), x.h), gpu, eff, d),
            _gemm_part("gemm.mlp_out", Gemm(tok, x.h, _ceil_div(x.f, t)), gpu, eff, d),
        ]
    parts += experts
    heads = x.b * x.a // t
    elem, core_elem = decoder_memory_bytes(x, family)
    if family == "gpt" and not x.fused_core:
        qk = Gemm(x.s, x.s, x.head_dim, heads)
        pv = Gemm(x.s, x.head_dim, x.s, heads)
        kernels = _CORE_ELEMENTWISE_KERNELS[family]
        fw = gemm_s(qk, gpu, eff, element_bytes=d) + gemm_s(pv, gpu, eff, element_bytes=d)
        fw += elementwise_s(core_elem, gpu, eff, kernels=kernels)
        bw = sum(gemm_s(g, gpu, eff, element_bytes=d) for g in (qk.dgrad, qk.wgrad, pv.dgrad))
        bw += gemm_s(pv.wgrad, gpu, eff, element_bytes=d)
        bw += elementwise_s(2.0 * core_elem, gpu, eff, kernels=kernels)
        parts.append(Part("attention", fw, bw, 0.0, selective=True))
    else:
        # Context parallel over full-attention layers: the ring's cp steps, each its own
        # kernel (planner.catalog.ring_attention); a sliding layer's queries attend their
        # window, a band without the causal half, in cp kernels.
        if x.c > 1 and x.window == 0:
            fw, bw = (ring_attention_s(x, gpu, eff, backward=b) for b in (False, True))
        else:
            general = not x.standard_heads or x.c > 1
            fw, bw = (
                flash_attention_s(
                    seq=x.keys,
                    head_dim=x.head_dim,
                    batch_heads=heads,
                    causal=x.keys == x.s,
                    backward=backward,
                    gpu=gpu,
                    eff=eff,
                    element_bytes=d,
                    queries=x.sl if general else None,
                    value_dim=x.value_dim if general else None,
                    kernels=x.c,
                    band=x.keys < x.s,
                )
                for backward in (False, True)
            )
        # the fused kernel recomputes the scores itself: nothing for selective recompute
        parts.append(Part("attention", fw, bw, 0.0))
    kernels = _ELEMENTWISE_KERNELS[family]
    parts.append(
        Part(
            "elementwise",
            elementwise_s(elem, gpu, eff, kernels=kernels),
            elementwise_s(2.0 * elem, gpu, eff, kernels=kernels),
            0.0,
        )
    )
    return LayerWork(tuple(parts))


def ring_attention_s(x: Shape, gpu: GpuSpec, eff: Efficiency, *, backward: bool) -> float:
    """The attention core of a context-parallel rank over one full-attention layer: the
    ring's cp steps (planner.catalog.ring_attention), with c = s / (2 cp) tokens a chunk:
    step 0 causal over the rank's 2c queries and keys, then cp - 1 unmasked steps of 2c
    queries over c keys (ranks r >= i) or c queries over 2c keys (r < i); the ranks wait for
    each other at the layer's exchange, so the slower of the two kinds of step counts. Each
    step is its own flash kernel, quantized over its own query and key blocks, and adds the
    framework's memory-bound merge (forward) or gradient accumulation (backward) kernels."""
    c = x.sl // 2
    heads = x.b * x.a // x.t

    def kernel(queries: int, keys: int, causal: bool) -> float:
        return flash_attention_s(
            seq=keys,
            queries=queries,
            causal=causal,
            head_dim=x.head_dim,
            value_dim=x.value_dim,
            batch_heads=heads,
            backward=backward,
            gpu=gpu,
            eff=eff,
            element_bytes=x.d,
        )

    first = kernel(2 * c, 2 * c, True)
    step = max(kernel(2 * c, c, False), kernel(c, 2 * c, False))
    ring = x.ring
    out = float(x.b * 2 * c * x.a // x.t * x.value_dim)
    kv = float(x.b * 2 * c * x.exchanged_kv_heads // x.t * x.head_dim)
    if backward:
        moved, kernels = ring.backward_accumulate(q_elements=out, kv_elements=kv, element_bytes=x.d)
        merges = x.c
    else:
        moved, kernels = ring.forward_merge(out_elements=out, kv_elements=kv, element_bytes=x.d)
        merges = ring.forward_merges(x.c)
    merge = elementwise_s(moved, gpu, eff, kernels=kernels)
    return first + (x.c - 1) * step + merges * merge


def cp_gather_times(x: Shape, gpu: GpuSpec, eff: Efficiency) -> tuple[float, float]:
    """(forward, backward) of a context-parallel layer's attention core in the all-gather
    form (`gather_attention_s`) where the framework runs it (Megatron-Core's allgather on a
    full-attention layer); else (0, 0): the core's own times either way."""
    if x.c > 1 and x.window == 0 and not x.ring.gather_overlaps_first_step:
        fw = gather_attention_s(x, gpu, eff, backward=False)
        return fw, gather_attention_s(x, gpu, eff, backward=True)
    return 0.0, 0.0


def gather_attention_s(x: Shape, gpu: GpuSpec, eff: Efficiency, *, backward: bool) -> float:
    """The attention core of a rank under Megatron-Core's all-gather (Transformer Engine
    AttnFuncWithCPAndKVAllGather; Llama 3 §3.3.2): with K and V gathered, one causal kernel
    per local query chunk over the keys it attends, chunk r over (r + 1) c and chunk
    2cp - 1 - r over (2cp - r) c keys: together the rank's 2c queries over s keys with half
    the pairs masked, in two launches."""
    general = not x.standard_heads or x.c > 1
    return flash_attention_s(
        seq=x.keys,
        head_dim=x.head_dim,
        batch_heads=x.b * x.a // x.t,
        causal=x.keys == x.s,
        backward=backward,
        gpu=gpu,
        eff=eff,
        element_bytes=x.d,
        queries=x.sl if general else None,
        value_dim=x.value_dim if general else None,
        kernels=2,
    )


def head_work(x: Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerWork:
    """Final norm + output projection (h x V/t) + vocab-parallel cross-entropy.

    Memory-bound: the norm (2e*d/q) and three passes over the fp32 logits (cast, max/sum,
    softmax: 12*s*b*V/t), the same in backward (Korthikanti 2022 §4.3 for the logits' size).
    """
    del family  # both families' heads are the same kernels
    proj = _gemm_part("gemm.lm_head", Gemm(x.tokens, _ceil_div(x.v, x.t), x.h), gpu, eff, x.d)
    logits = 4.0 * x.sl * x.b * x.v / x.t
    mem = 2.0 * x.e * x.d / x.q + 3.0 * logits
    elem = elementwise_s(mem, gpu, eff, kernels=4)
    return LayerWork((proj, Part("elementwise", elem, elem, 0.0)))


def embedding_work(x: Shape, family: str, gpu: GpuSpec, eff: Efficiency) -> LayerWork:
    """Token (vocab-parallel) + learned position (gpt) embeddings: memory-bound only.

    Forward: gather (read + write e*d), gpt also the position add (3e*d) and dropout (2e*d +
    mask); the backward (a scatter-add into the embedding gradient) is taken as the forward's
    bytes, all of it weight gradient.
    """
    d, e = x.d, x.e
    if family == "gpt":
        mem, kernels = (7.0 * e * d + e) / x.q, 3
    else:
        mem, kernels = 2.0 * e * d / x.q, 1
    t = elementwise_s(mem, gpu, eff, kernels=kernels)
    return LayerWork((Part("elementwise", t, 0.0, t),))
