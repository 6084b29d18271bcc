"""The kernels and bytes of an MoE layer's experts and of latent attention on one rank.

Megatron-Core's MoE parallel folding (docs/moe.md): the attention and dense parts of a layer
run on tp x cp x dp ranks, the routed experts on etp x ep x edp ranks of the same GPUs. One
rank's view of an MoE layer, with T_loc = b * s / cp the tokens of its sequence share:

- it routes T_r = T_loc / tp tokens (the tp group's tokens split over its ranks: the
  sequence-parallel layout in which Megatron-Core runs MoE layers with tp > 1), through the
  router, one [T_r, h] x [h, E] GEMM (Switch Transformer, Fedus et al. 2021 §2.1);
- it holds E / ep experts, each sharded over etp (f_e / etp columns of the first matrix,
  rows of the second); under balanced routing every expert receives the copies of the
  etp x ep ranks that route to it, T_r * k * etp * ep / E rows, and the busiest rank's
  experts `load_imbalance` times that (capped by a capacity factor): the grouped GEMMs
  [rows, h] x [h, m_in * f_e / etp] and [rows, f_e / etp] x [f_e / etp, h], E / ep of each
  (Megatron-Core's grouped GEMM; GShard, Lepikhin et al. 2020 §2.2);
- dispatch and combine are all-to-alls over ep of T_r * k token copies of h elements (the
  busiest rank receiving `load_imbalance` times that), in the forward and again in the
  backward (Megatron-Core's alltoall token dispatcher); with
  etp > 1 the received rows are all-gathered over etp before the experts and reduce-scattered
  after (planner.cost.inputs times them);
- the shared experts (DeepSeekMoE §3.2) are a dense tp-parallel MLP of n_s x f_e on T_loc
  tokens (planner.catalog.layer_work's gemm.mlp_in / gemm.mlp_out with f = n_s x f_e).

MLA (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1) as GEMMs of its projection shapes, every one split
by tp (Megatron-Core keeps the two down-projections whole on every tp rank: about 8 % of
DeepSeek-V3's attention weights, counted here as split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec
from planner.catalog.kernels import Gemm, elementwise_s, gemm_s
from planner.catalog.layer_work import Part, Shape
from planner.specs.model import MlaSpec, MoeSpec


@dataclass(frozen=True)
class RoutingTerms:
    """How real routing departs from the balanced one the formulas assume.

    `load_imbalance`: the busiest expert-parallel rank's token copies over the mean (>= 1).
    Dropless MoE layers wait for their busiest rank at the combine all-to-all, so its expert
    GEMMs and activations set the layer's time and memory. Default 1.25: the capacity factor
    Switch Transformer trains with (Fedus et al. 2021, §2.2 and Table 1: 1.25 keeps the
    dropped tokens near 1 % under its auxiliary balancing loss, i.e. the busiest expert
    stays within 1.25 x the mean); Megatron-Core's aux-loss and DeepSeek-V3's bias-based
    balancing (§2.1.2) aim at the same bound. A capacity factor c caps it at c.
    """

    load_imbalance: float = 1.25

    def __post_init__(self) -> None:
        if not 1.0 <= self.load_imbalance <= 64.0:
            raise ValueError(f"load_imbalance={self.load_imbalance} must be in [1, 64]")


DEFAULT_ROUTING = RoutingTerms()


@dataclass(frozen=True)
class ExpertShape:
    """One rank's routed experts (module docstring)."""

    num_experts: int  # E
    top_k: int  # k
    ffn: int  # f_e
    ep: int
    etp: int
    routed_tokens: int  # T_r
    matrices_in: int  # columns of the first matrix per f_e: 2 gated (SwiGLU), 1 GELU
    capacity_factor: float | None
    load_imbalance: float

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep

    @property
    def mean_rows(self) -> float:
        """Rows each expert receives under balanced routing: T_r k etp ep / E, each rank's
        share capped by a capacity factor at ceil(c T_r k / E) (GShard §2.2)."""
        own = self.routed_tokens * self.top_k / self.num_experts
        if self.capacity_factor is not None:
            own = min(own, float(math.ceil(self.capacity_factor * own)))
        return own * self.etp * self.ep

    @property
    def busiest_rows(self) -> float:
        """Rows of the busiest rank's experts: the mean x load_imbalance, at most the
        capacity factor's cap."""
        factor = self.load_imbalance
        if self.capacity_factor is not None:
            factor = min(factor, max(1.0, self.capacity_factor))
        return self.mean_rows * factor

    @property
    def ffn_shard(self) -> int:
        return max(1, math.ceil(self.ffn / self.etp))

    def model_flops(self, hidden: int) -> float:
        """Forward model FLOPs of the router and routed experts for the rank's T_r tokens
        (balanced: the work its own token copies cause, wherever they run)."""
        m = self.matrices_in + 1
        router = 2.0 * self.routed_tokens * hidden * self.num_experts
        rows = self.mean_rows / (self.etp * self.ep) * self.num_experts
        return router + 2.0 * m * rows * hidden * self.ffn

    def param_count(self, per_expert: int) -> float:
        """Routed-expert parameters on this rank: E / ep experts of `per_expert` / etp."""
        return self.local_experts * per_expert / self.etp

    def dispatch_bytes(self, hidden: int, element_bytes: int) -> float:
        """What the busiest rank moves in one all-to-all: every rank sends its T_r k token
        copies of h elements, and the busiest receives load_imbalance x as many (an
        all-to-all ends when its busiest receiver has its data): load_imbalance T_r k h d."""
        return self.load_imbalance * self.routed_tokens * self.top_k * hidden * element_bytes

    def gathered_bytes(self, hidden: int, element_bytes: int) -> float:
        """Rows the rank's experts process (after the etp all-gather), x h x d."""
        return self.busiest_rows * self.local_experts * hidden * element_bytes

    def activation_bytes(self, hidden: int, element_bytes: int) -> float:
        """Saved for backward by the routed part (planner.catalog.moe.layer_activation_bytes
        per rank; the router's input is the MLP input the layer already saves): fp32
        probabilities 4 T_r E, the permuted rows and the experts' outputs (rows h d each),
        and the experts' inner activations (SwiGLU gate, up and down input 3 rows f_e/etp d;
        GELU 2 rows f_e/etp d + rows h d)."""
        d = float(element_bytes)
        rows = self.busiest_rows * self.local_experts
        routed = 4.0 * self.routed_tokens * self.num_experts
        inner = (self.matrices_in + 1) * rows * self.ffn_shard * d
        if self.matrices_in == 1:
            inner = 2.0 * rows * self.ffn_shard * d + rows * hidden * d
        return routed + 2.0 * rows * hidden * d + inner


def expert_shape(
    moe: MoeSpec,
    *,
    tokens: int,
    tp: int,
    ep: int,
    etp: int,
    gated: bool,
    routing: RoutingTerms,
) -> ExpertShape:
    """The ExpertShape of an MoE layer for a rank holding `tokens` tokens (b s / cp)."""
    if moe.num_experts % ep:
        raise ValueError(f"ep={ep} must divide num_experts={moe.num_experts}")
    return ExpertShape(
        num_experts=moe.num_experts,
        top_k=moe.experts_per_token,
        ffn=moe.moe_ffn_hidden_size,
        ep=ep,
        etp=etp,
        routed_tokens=max(1, tokens // tp),
        matrices_in=2 if gated else 1,
        capacity_factor=moe.capacity_factor,
        load_imbalance=routing.load_imbalance,
    )


def _part(kind: str, g: Gemm, gpu: GpuSpec, eff: Efficiency, d: int) -> Part:
    return Part(
        kind=kind,
        fw_s=gemm_s(g, gpu, eff, element_bytes=d),
        bw_input_s=gemm_s(g.dgrad, gpu, eff, element_bytes=d),
        bw_weight_s=gemm_s(g.wgrad, gpu, eff, element_bytes=d),
    )


def expert_parts(x: Shape, es: ExpertShape, gpu: GpuSpec, eff: Efficiency) -> tuple[Part, ...]:
    """The router GEMM, the two grouped expert GEMMs of the busiest rank, and the MoE
    element-wise kernels: permute and unpermute (read and write the token copies, rows h d
    each), the weighted combine, the gated activation over rows x f_e/etp, and the router's
    softmax / top-k over T_r x E fp32 scores."""
    d, h = x.d, x.h
    rows = max(1, math.ceil(es.busiest_rows))
    n_in = es.matrices_in * es.ffn_shard
    local = es.local_experts
    router = Gemm(es.routed_tokens, es.num_experts, h)
    expert_in = Gemm(rows, n_in, h, local)
    expert_out = Gemm(rows, h, es.ffn_shard, local)
    copies = float(rows * local * h * d)
    act = (es.matrices_in + 1) * float(rows * local * es.ffn_shard * d)
    scores = 3.0 * 4.0 * es.routed_tokens * es.num_experts
    elem = 2.0 * 2.0 * copies + copies + act + scores
    fw = elementwise_s(elem, gpu, eff, kernels=5)
    return (
        _part("gemm.router", router, gpu, eff, d),
        _part("gemm.expert_in", expert_in, gpu, eff, d),
        _part("gemm.expert_out", expert_out, gpu, eff, d),
        Part("elementwise.moe", fw, elementwise_s(2.0 * elem, gpu, eff, kernels=5), 0.0),
    )


# expert_floor_parts' parts are scaled by this: their closed forms and expert_parts' kernel
# times round differently, and a floor must stay at or below every one of them
FLOOR_MARGIN = 1.0 - 1e-9


def expert_floor_parts(
    x: Shape, es: ExpertShape, gpu: GpuSpec, eff: Efficiency
) -> tuple[Part, ...]:
    """Parts at or below expert_parts' for every ep and etp of the same layer and tokens
    (`es` at any of them): a floor of an MoE layer's time that holds for the whole expert
    grid of a (tp, cp, micro-batch) point, the search's coarse floors.

    Why each part is a floor. The router's GEMM reads T_r, E and h only: the same part.
    With base = T_r k / E (capped as in mean_rows) x the busiest rank's factor, both
    independent of ep and etp, the busiest rank runs E / ep local experts of
    rows >= base etp ep each (mean_rows x factor, rounded up), f_s = ceil(f_e / etp) >=
    f_e / etp columns, so for each grouped GEMM (and its dgrad and wgrad, the same M N K
    product and the same three operands):
        batch M N K = (E / ep) rows (m_in f_s) h >= E base m_in f_e h     (expert_in)
                    = (E / ep) rows h f_s        >= E base f_e h          (expert_out)
    and gemm_s >= max(2 batch M N K / (peak x matmul_fraction), bytes(A) + bytes(C) over
    HBM) + kernel_overhead_s: every wave of tiles covers at most sm_count tiles of Tm x Tn,
    so waves x Tm x Tn x sm_count >= batch M N; the operand B (the weights, which shrink
    with ep and etp) is left out of the bytes; expert_in's A (rows x h) and C (rows x
    m_in f_s) are at least E base h and E base m_in f_e elements over the local experts,
    expert_out's A (rows x f_s) and C (rows x h) at least E base f_e and E base h. The
    element-wise kernels move 5 copies + act + scores bytes with copies = rows local h d >=
    E base h d and act = (m_in + 1) rows local f_s d >= (m_in + 1) E base f_e d (memory
    time grows with bytes).
    Each floor is scaled by FLOOR_MARGIN against the rounding of the two forms."""
    d, h = x.d, x.h
    base = es.busiest_rows / (es.etp * es.ep)
    m_in = es.matrices_in
    experts = float(es.num_experts)

    def floor_gemm(flops: float, moved: float) -> float:
        compute = flops / (gpu.peak_flops * eff.matmul_fraction)
        return FLOOR_MARGIN * max(compute, eff.memory_s(moved, gpu)) + eff.kernel_overhead_s

    rows_total = experts * base  # sum over local experts of their rows, at least
    t_in = floor_gemm(
        2.0 * rows_total * m_in * es.ffn * h, (rows_total * h + rows_total * m_in * es.ffn) * d
    )
    t_out = floor_gemm(2.0 * rows_total * h * es.ffn, (rows_total * es.ffn + rows_total * h) * d)
    copies = rows_total * h * d
    act = (m_in + 1) * rows_total * es.ffn * d
    scores = 3.0 * 4.0 * es.routed_tokens * es.num_experts
    elem = 2.0 * 2.0 * copies + copies + act + scores
    fw = FLOOR_MARGIN * eff.memory_s(elem, gpu) + 5 * eff.kernel_overhead_s
    bw = FLOOR_MARGIN * eff.memory_s(2.0 * elem, gpu) + 5 * eff.kernel_overhead_s
    router = Gemm(es.routed_tokens, es.num_experts, h)
    return (
        _part("gemm.router", router, gpu, eff, d),
        Part("gemm.expert_in", t_in, t_in, t_in),
        Part("gemm.expert_out", t_out, t_out, t_out),
        Part("elementwise.moe", fw, bw, 0.0),
    )


def mla_parts(x: Shape, mla: MlaSpec, gpu: GpuSpec, eff: Efficiency) -> list[Part]:
    """MLA's projections as GEMMs (module docstring), split by t: q_a [T, h] x [h, q_lora]
    and q_b [T, q_lora] x [q_lora, a dq / t] (or q [T, h] x [h, a dq / t]), kv_a
    [T, h] x [h, kv_lora + rope], kv_b [T, kv_lora] x [kv_lora, a (nope + dv) / t], and the
    output projection [T, a dv / t] x [a dv / t, h]."""
    d, t, tok, h, a = x.d, x.t, x.tokens, x.h, x.a
    dq, dv = x.head_dim, x.value_dim

    def split(n: int) -> int:
        return max(1, math.ceil(n / t))

    gemms: list[tuple[str, Gemm]] = []
    if mla.q_lora_rank is None:
        gemms.append(("gemm.qkv", Gemm(tok, split(a * dq), h)))
    else:
        gemms.append(("gemm.q_down", Gemm(tok, split(mla.q_lora_rank), h)))
        gemms.append(("gemm.qkv", Gemm(tok, split(a * dq), mla.q_lora_rank)))
    kv_rank = mla.kv_lora_rank
    gemms.append(("gemm.kv_down", Gemm(tok, split(kv_rank + mla.qk_rope_head_dim), h)))
    gemms.append(("gemm.kv_up", Gemm(tok, split(a * (mla.qk_nope_head_dim + dv)), kv_rank)))
    gemms.append(("gemm.attn_out", Gemm(tok, h, split(a * dv))))
    return [_part(kind, g, gpu, eff, d) for kind, g in gemms]
