"""Model specs: the architecture of a built-in family, and the ModelProfile contract.

ModelProfile is the one schema shared by the profiler's output, the analytic catalog's output
and the API (DESIGN.md, contract 1). A profile lists the model's layers in execution order
(embedding, decoder blocks, LM head + loss) and, at each measured point (micro-batch size, tp
degree, sequence parallel), one LayerCost per distinct layer kind.

Rule for values in between (ModelProfile.cost):
1. a point with the same (micro_batch_size, tp, sequence_parallel) is used as is;
2. otherwise, among points with the same tp (and the same sequence-parallel setting if any has
   it, else the other one), times and activation/output bytes are interpolated linearly in the
   micro-batch size between the two nearest measured sizes (extrapolated from the two nearest
   when outside the range; proportionally from a single point when only one exists);
   parameter bytes do not depend on the micro-batch size;
3. with no point at that tp, the nearest tp is scaled: times, activation bytes and parameter
   bytes x tp_measured / tp (the sharded part dominates; Megatron splits heads and FFN by tp).

`action_overhead_s` is not per layer: the fixed time a pipeline framework spends on each
pipeline action (F, B, or a split backward's I and W) besides the layers' own compute,
measured by the profiler (`profiler.action_overhead`: torch.distributed.pipelining's
PipelineStage entry points on a near-zero-cost module minus the same module called directly).
It defaults to 0 (an analytic profile, or one measured before the field existed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from planner.specs.base import Dtype, Frozen, ModeValues
from planner.specs.limits import BOUNDS as B
from planner.specs.limits import TEXT

Family = Literal["gpt", "llama"]
# The attention core's kernel: one fused flash kernel, or batched GEMMs with a separate softmax
# and dropout (Megatron-LM 2021, the stack of its Table 1).
AttentionKernel = Literal["flash", "unfused"]


@dataclass(frozen=True)
class MoeBounds:
    """Bounds on the mixture-of-experts and attention-shape numbers, with their reasons.

    - num_experts <= 2**14: the most experts per layer published is 384 (Kimi K2; DeepSeek-V3
      has 256), so 16,384 is ~40x that.
    - experts_per_token <= 2**10 and shared experts <= 2**10: published top-k is 1-22
      (Switch: 1, DeepSeek-V3: 8, Qwen3: 8), shared experts 0-2.
    - capacity_factor in (0, 64]: GShard and Switch use 1.0-2.0; above num_experts/top-k
      a capacity factor drops nothing and only pads.
    - head_dim <= hidden_size bound; sliding window <= seq_length bound.
    """

    num_experts: int = 2**14
    experts_per_token: int = 2**10
    shared_experts: int = 2**10
    capacity_factor: float = 64.0


MOE_BOUNDS = MoeBounds()
MB = MOE_BOUNDS


class MoeSpec(Frozen):
    """Mixture-of-experts layers (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
    Fedus et al. 2021; DeepSeekMoE, Dai et al. 2024) in place of a block's dense MLP.

    Decoder layer i (0-based) is an MoE layer when i >= first_dense_layers and
    (i - first_dense_layers) % moe_layer_frequency == 0; the others keep the dense MLP of
    `ffn_hidden_size`. Each MoE layer has a router (a linear h -> num_experts and a softmax or
    sigmoid over it), `num_experts` routed experts of `moe_ffn_hidden_size` of which each token
    uses `experts_per_token`, and `num_shared_experts` experts of the same size that every
    token uses (DeepSeekMoE §3.2). Experts are the family's MLP (SwiGLU for llama, GELU for gpt).
    `capacity_factor` None is dropless (Megatron-Core's default); a value caps each expert at
    capacity_factor x tokens x top-k / experts tokens (GShard §2.2, Switch §2.2).
    `router` and `aux_loss_free` (DeepSeek-V3 §2.1.2's bias-based balancing) only change the
    router's small cost, not the experts'.
    """

    num_experts: int = Field(gt=0, le=MB.num_experts)
    experts_per_token: int = Field(gt=0, le=MB.experts_per_token, description="top-k")
    moe_ffn_hidden_size: int = Field(gt=0, le=B.hidden_size, description="per expert")
    num_shared_experts: int = Field(default=0, ge=0, le=MB.shared_experts)
    first_dense_layers: int = Field(default=0, ge=0, le=B.num_layers)
    moe_layer_frequency: int = Field(default=1, gt=0, le=B.num_layers)
    router: Literal["softmax", "sigmoid"] = "softmax"
    aux_loss_free: bool = False
    capacity_factor: float | None = Field(
        default=None, gt=0, le=MB.capacity_factor, description="None: dropless"
    )

    @model_validator(mode="after")
    def _check(self) -> MoeSpec:
        k, e = self.experts_per_token, self.num_experts
        if k > e:
            raise ValueError(f"experts_per_token={k} exceeds num_experts={e}")
        return self

    def is_moe_layer(self, index: int) -> bool:
        """Whether decoder layer `index` (0-based) is an MoE layer."""
        i = index - self.first_dense_layers
        return i >= 0 and i % self.moe_layer_frequency == 0


class MlaSpec(Frozen):
    """Multi-head latent attention's projection shapes (DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1).

    Queries: h -> q_lora_rank (then RMSNorm) -> heads x (qk_nope + qk_rope); keys and values:
    h -> kv_lora_rank + qk_rope (the rope key is shared by the heads), then RMSNorm and
    kv_lora_rank -> heads x (qk_nope + v); output heads x v -> h. `q_lora_rank` None projects
    queries directly (DeepSeek-V2-Lite). The attention core is counted as ordinary attention
    with a qk head size of qk_nope + qk_rope and a value head size of v (training does not use
    the absorbed-weight inference form).
    """

    q_lora_rank: int | None = Field(default=None, gt=0, le=B.hidden_size)
    kv_lora_rank: int = Field(gt=0, le=B.hidden_size)
    qk_nope_head_dim: int = Field(gt=0, le=B.hidden_size)
    qk_rope_head_dim: int = Field(gt=0, le=B.hidden_size)
    v_head_dim: int = Field(gt=0, le=B.hidden_size)


class SlidingWindow(Frozen):
    """Sliding-window attention (Beltagy et al. 2020; Mistral 7B): a sliding layer's query
    attends to itself and the `window - 1` tokens before it.

    `full_every` None: every layer slides. k >= 2: decoder layer i attends fully when
    (i + 1) % k == 0 and slides otherwise (GPT-OSS alternates, k = 2: layers 0, 2, ... slide).
    """

    window: int = Field(gt=0, le=B.seq_length)
    full_every: int | None = Field(default=None, ge=2, le=B.num_layers)

    def is_sliding(self, index: int) -> bool:
        return self.full_every is None or (index + 1) % self.full_every != 0


#: Optional ModelArch fields added after the first schema: left out of the JSON when None, so
#: documents, request hashes and stored plans of models without them are unchanged.
_OPTIONAL_SHAPES = ("head_dim", "moe", "mla", "sliding_window")


def _is_none(value: object) -> bool:
    return value is None


def _is_zero(value: float) -> bool:
    return value == 0


class ModelArch(Frozen):
    """A built-in model family's shapes (Megatron GPT or Llama), optionally with
    mixture-of-experts layers (`moe`), a head size other than hidden / heads (`head_dim`),
    latent attention (`mla`) and sliding-window layers (`sliding_window`)."""

    family: Family
    name: str = Field(default="", max_length=TEXT.name_chars)
    num_layers: int = Field(gt=0, le=B.num_layers, description="decoder blocks")
    hidden_size: int = Field(gt=0, le=B.hidden_size)
    num_attention_heads: int = Field(gt=0, le=B.num_heads)
    num_kv_heads: int | None = Field(
        default=None, gt=0, le=B.num_heads, description="default: attention heads"
    )
    ffn_hidden_size: int | None = Field(
        default=None,
        gt=0,
        le=B.hidden_size,
        description="default: 4 x hidden (gpt), required for llama; the dense layers' MLP",
    )
    vocab_size: int = Field(gt=0, le=B.vocab_size)
    tied_embeddings: bool | None = Field(default=None, description="default: gpt yes, llama no")
    head_dim: int | None = Field(
        default=None,
        gt=0,
        le=B.hidden_size,
        exclude_if=_is_none,
        description="default: hidden / heads",
    )
    moe: MoeSpec | None = Field(
        default=None, exclude_if=_is_none, description="mixture-of-experts layers"
    )
    mla: MlaSpec | None = Field(
        default=None, exclude_if=_is_none, description="latent attention (DeepSeek)"
    )
    sliding_window: SlidingWindow | None = Field(
        default=None, exclude_if=_is_none, description="sliding-window layers"
    )
    attention_kernel: AttentionKernel | None = Field(
        default=None,
        exclude_if=_is_none,
        description="the attention core: one fused 'flash' kernel, or 'unfused' batched GEMMs "
        "and softmax (Megatron-LM 2021); default: gpt unfused, llama flash. Context "
        "parallelism needs 'flash'",
    )

    @model_validator(mode="after")
    def _check(self) -> ModelArch:
        h, a = self.hidden_size, self.num_attention_heads
        if h % a and self.head_dim is None and self.mla is None:
            raise ValueError(
                f"num_attention_heads={a} must divide hidden_size={h} (remainder {h % a}) "
                "unless head_dim is given"
            )
        kv = self.num_kv_heads
        if kv is not None and a % kv:
            raise ValueError(f"num_kv_heads={kv} must divide num_attention_heads={a}")
        if self.family == "llama" and self.ffn_hidden_size is None:
            raise ValueError("ffn_hidden_size=None: required for family 'llama'")
        if self.family == "llama" and self.attention_kernel == "unfused":
            raise ValueError(
                "attention_kernel='unfused': the llama family is costed with its fused flash "
                "kernel only (the unfused core is Megatron-LM 2021's gpt)"
            )
        if self.head_dim is not None and self.head_dim % 2 and self.family == "llama":
            raise ValueError(f"head_dim={self.head_dim} must be even (rotary pairs)")
        if self.mla is not None and (self.head_dim is not None or kv is not None):
            raise ValueError(
                f"mla sets the head sizes and shares one latent by all heads: head_dim="
                f"{self.head_dim} and num_kv_heads={kv} must be left unset"
            )
        moe = self.moe
        if moe is not None and moe.first_dense_layers >= self.num_layers:
            raise ValueError(
                f"moe.first_dense_layers={moe.first_dense_layers} leaves no MoE layer among "
                f"num_layers={self.num_layers}"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Per-head width of queries, keys and values: head_dim, else hidden / heads."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def tied(self) -> bool:
        return self.tied_embeddings if self.tied_embeddings is not None else self.family == "gpt"

    @property
    def display_name(self) -> str:
        return self.name or f"{self.family}-{self.num_layers}x{self.hidden_size}"

    @property
    def fused_attention(self) -> bool:
        """Whether the attention core is one fused flash kernel (`attention_kernel`, else the
        family's default: llama's is, gpt's (Megatron-LM 2021) is not)."""
        if self.attention_kernel is not None:
            return self.attention_kernel == "flash"
        return self.family == "llama"

    @property
    def is_plain(self) -> bool:
        """No MoE, latent attention, window or custom head size: what the dense catalog costs."""
        return all(getattr(self, key) is None for key in _OPTIONAL_SHAPES)

    def is_moe_layer(self, index: int) -> bool:
        return self.moe is not None and self.moe.is_moe_layer(index)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_layers))


class LayerRef(Frozen):
    """One layer of the model in execution order; `kind` keys its costs in every ProfilePoint."""

    name: str = Field(min_length=1, max_length=TEXT.name_chars)
    kind: str = Field(min_length=1, max_length=TEXT.name_chars)


class LayerCost(Frozen):
    """Costs of one layer kind for one micro-batch, as one tp rank sees it.

    Times are seconds; `bw_input_s + bw_weight_s` is the full backward (B = I + W, Qi et al.
    2024). `recompute_s` is the extra forward work done in backward under each recompute mode
    (0 for `none`). `activation_bytes` is what is saved for backward under each mode.
    """

    fw_s: float = Field(ge=0, le=B.measured_s)
    bw_input_s: float = Field(ge=0, le=B.measured_s)
    bw_weight_s: float = Field(ge=0, le=B.measured_s)
    recompute_s: ModeValues
    activation_bytes: ModeValues
    param_bytes: float = Field(
        le=B.measured_bytes, ge=0, description="parameter bytes held by one tp rank"
    )
    param_count: float = Field(
        le=B.measured_bytes, ge=0, description="parameters held by one tp rank"
    )
    output_bytes: float = Field(
        le=B.measured_bytes, ge=0, description="bytes of the layer output (stage boundary)"
    )
    tp_comm_bytes: float = Field(
        le=B.measured_bytes,
        default=0,
        ge=0,
        description="bytes all-reduced by the TP group per micro-batch, fw + bw",
    )
    fw_flops: float = Field(
        default=0, ge=0, le=B.flops, description="model FLOPs of the forward, one tp rank"
    )
    spread: dict[str, float] | None = Field(
        default=None, description="relative spread (e.g. IQR/median) of each measured timing"
    )
    # A runtime's split backward (zb-h1, zbv) may cost more than the full one split in two:
    # torch.distributed.pipelining's stage_backward_input walks the graph and hooks it, and
    # stage_backward_weight runs one autograd call per parameter group (measured by
    # profiler.layer_profiler through those functions). None: I and W as above.
    split_bw_input_s: float | None = Field(
        default=None,
        ge=0,
        le=B.measured_s,
        description="I as a split-backward schedule runs it (None: bw_input_s)",
    )
    split_bw_weight_s: float | None = Field(
        default=None,
        ge=0,
        le=B.measured_s,
        description="W as a split-backward schedule runs it (None: bw_weight_s)",
    )

    # Context and expert parallelism (docs/moe.md; the analytic catalog fills them, a measured
    # profile leaves them at 0). Left out of the JSON at 0, so profiles keep their hashes.
    expert_param_count: float = Field(
        default=0,
        ge=0,
        le=B.measured_bytes,
        exclude_if=_is_zero,
        description="the routed experts' share of param_count (sharded over ep x etp, "
        "gradients reduced over edp)",
    )
    cp_kv_bytes: float = Field(
        default=0,
        ge=0,
        le=B.measured_bytes,
        exclude_if=_is_zero,
        description="K and V one context-parallel rank holds (one ring step's send)",
    )
    attention_fw_s: float = Field(
        default=0,
        ge=0,
        le=B.measured_s,
        exclude_if=_is_zero,
        description="the attention core's share of fw_s (what a cp ring step overlaps)",
    )
    attention_bw_s: float = Field(
        default=0,
        ge=0,
        le=B.measured_s,
        exclude_if=_is_zero,
        description="the attention core's share of bw_input_s",
    )
    cp_gather_fw_s: float = Field(
        default=0,
        ge=0,
        le=B.measured_s,
        exclude_if=_is_zero,
        description="the attention core's forward when K and V are all-gathered first "
        "(Megatron-Core's allgather: two kernels, no ring steps) instead of attention_fw_s; "
        "0: the same as attention_fw_s",
    )
    cp_gather_bw_s: float = Field(
        default=0,
        ge=0,
        le=B.measured_s,
        exclude_if=_is_zero,
        description="the same for the core's backward, instead of attention_bw_s",
    )
    ep_dispatch_bytes: float = Field(
        default=0,
        ge=0,
        le=B.measured_bytes,
        exclude_if=_is_zero,
        description="bytes the busiest rank moves in one of an MoE layer's all-to-alls "
        "(4 per micro-batch): its token copies x the load imbalance",
    )
    etp_gather_bytes: float = Field(
        default=0,
        ge=0,
        le=B.measured_bytes,
        exclude_if=_is_zero,
        description="rows one rank's local experts process, bytes (all-gathered over etp "
        "before them, reduce-scattered after)",
    )

    @property
    def bw_s(self) -> float:
        return self.bw_input_s + self.bw_weight_s

    def split_costs(self) -> tuple[float, float]:
        """(I, W) of a split-backward schedule: the split fields when measured, else I and W."""
        i = self.bw_input_s if self.split_bw_input_s is None else self.split_bw_input_s
        w = self.bw_weight_s if self.split_bw_weight_s is None else self.split_bw_weight_s
        return i, w

    def times_scaled(self, k: float) -> LayerCost:
        """Every compute time (fw, bw, recompute, split I / W, the attention core's share)
        times k; bytes and FLOPs kept."""
        r = self.recompute_s

        def opt(x: float | None) -> float | None:
            return None if x is None else x * k

        return self.model_copy(
            update={
                "fw_s": self.fw_s * k,
                "bw_input_s": self.bw_input_s * k,
                "bw_weight_s": self.bw_weight_s * k,
                "recompute_s": ModeValues(
                    none=r.none * k, selective=r.selective * k, full=r.full * k
                ),
                "split_bw_input_s": opt(self.split_bw_input_s),
                "split_bw_weight_s": opt(self.split_bw_weight_s),
                "attention_fw_s": self.attention_fw_s * k,
                "attention_bw_s": self.attention_bw_s * k,
                "cp_gather_fw_s": self.cp_gather_fw_s * k,
                "cp_gather_bw_s": self.cp_gather_bw_s * k,
            }
        )


class ActionOverhead(Frozen):
    """Fixed seconds a pipeline runtime adds to each action, besides the layers' compute.

    `f_s` per forward, `b_s` per full backward (non-split schedules), `i_s` and `w_s` per
    input-gradient and weight-gradient action of a split backward (zb-h1, zbv). 0 = unknown
    or negligible (the analytic catalog)."""

    f_s: float = Field(default=0.0, ge=0, description="per forward action (F)")
    b_s: float = Field(default=0.0, ge=0, description="per full backward action (B)")
    i_s: float = Field(default=0.0, ge=0, description="per input-gradient action (I)")
    w_s: float = Field(default=0.0, ge=0, description="per weight-gradient action (W)")

    @property
    def is_zero(self) -> bool:
        return not (self.f_s or self.b_s or self.i_s or self.w_s)

    def scaled(self, k: float) -> ActionOverhead:
        return ActionOverhead(
            f_s=self.f_s * k, b_s=self.b_s * k, i_s=self.i_s * k, w_s=self.w_s * k
        )


NO_OVERHEAD = ActionOverhead()


class ProfilePoint(Frozen):
    """Costs of each layer kind at one (micro_batch_size, tp, sequence_parallel)."""

    micro_batch_size: int = Field(gt=0)
    tp: int = Field(default=1, gt=0)
    sequence_parallel: bool = False
    kinds: dict[str, LayerCost]


class ModelProfile(Frozen):
    """Per-layer time and memory of a model (DESIGN.md, contract 1). Versioned JSON."""

    schema_version: Literal[1] = 1
    name: str = Field(min_length=1, max_length=TEXT.name_chars)
    source: Literal["analytic", "measured"]
    dtype: Dtype = "bf16"
    device_name: str = Field(default="", max_length=TEXT.name_chars)
    seq_length: int = Field(gt=0, le=B.seq_length)
    layers: tuple[LayerRef, ...] = Field(min_length=1, max_length=B.num_layers + 2)
    points: tuple[ProfilePoint, ...] = Field(min_length=1, max_length=B.profile_points)
    arch: ModelArch | None = Field(default=None, description="shapes, for a built-in family")
    torch_version: str | None = None
    measured_at: str | None = None
    notes: dict[str, str] = Field(default_factory=dict, max_length=TEXT.notes)
    action_overhead_s: ActionOverhead = Field(
        default=NO_OVERHEAD,
        description="fixed time the pipeline runtime adds per F / B / I / W action, measured "
        "on the profiling device (profiler.action_overhead); 0 when not measured",
    )

    @model_validator(mode="after")
    def _check(self) -> ModelProfile:
        kinds = {layer.kind for layer in self.layers}
        seen: set[tuple[int, int, bool]] = set()
        for i, point in enumerate(self.points):
            key = (point.micro_batch_size, point.tp, point.sequence_parallel)
            if key in seen:
                raise ValueError(f"points[{i}]: duplicate point {key}")
            seen.add(key)
            missing = sorted(kinds - point.kinds.keys())
            if missing:
                raise ValueError(
                    f"points[{i}] (micro_batch_size={point.micro_batch_size}, tp={point.tp}) "
                    f"lacks costs for layer kinds {missing}"
                )
        return self

    @property
    def model_hash(self) -> str:
        """Content hash of what determines plans: layers, costs, sequence length, dtype, and
        the per-action overhead when it is not zero (so a profile without it keeps its hash)."""
        fields = {"layers", "points", "seq_length", "dtype"}
        if not self.action_overhead_s.is_zero:
            fields.add("action_overhead_s")
        doc = self.model_dump(mode="json", include=fields)
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

    @property
    def tp_degrees(self) -> tuple[int, ...]:
        return tuple(sorted({p.tp for p in self.points}))

    @property
    def micro_batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({p.micro_batch_size for p in self.points}))

    def cost(
        self, kind: str, *, micro_batch_size: int, tp: int, sequence_parallel: bool = False
    ) -> LayerCost:
        """Cost of `kind` at the given point, by the rule in the module docstring."""
        exact = [
            p
            for p in self.points
            if (p.micro_batch_size, p.tp, p.sequence_parallel)
            == (micro_batch_size, tp, sequence_parallel)
        ]
        if exact:
            return exact[0].kinds[kind]
        tps = sorted({p.tp for p in self.points}, key=lambda t: (abs(t - tp), t))
        ref_tp = tps[0]
        same_tp = [p for p in self.points if p.tp == ref_tp]
        same_sp = [p for p in same_tp if p.sequence_parallel == sequence_parallel]
        pts = sorted(same_sp or same_tp, key=lambda p: p.micro_batch_size)
        cost = _interpolate(pts, kind, micro_batch_size)
        if ref_tp != tp:
            cost = _scale(cost, ref_tp / tp, params_too=True)
        return cost


def _interpolate(points: list[ProfilePoint], kind: str, b: int) -> LayerCost:
    if len(points) == 1:
        p = points[0]
        return _scale(p.kinds[kind], b / p.micro_batch_size, params_too=False)
    by_distance = sorted(points, key=lambda p: (abs(p.micro_batch_size - b), p.micro_batch_size))
    lo, hi = sorted(by_distance[:2], key=lambda p: p.micro_batch_size)
    t = (b - lo.micro_batch_size) / (hi.micro_batch_size - lo.micro_batch_size)
    a, c = lo.kinds[kind], hi.kinds[kind]

    def lerp(x: float, y: float) -> float:
        return max(0.0, x + (y - x) * t)

    def lerp_modes(x: ModeValues, y: ModeValues) -> ModeValues:
        return ModeValues(
            none=lerp(x.none, y.none),
            selective=lerp(x.selective, y.selective),
            full=lerp(x.full, y.full),
        )

    return LayerCost(
        fw_s=lerp(a.fw_s, c.fw_s),
        bw_input_s=lerp(a.bw_input_s, c.bw_input_s),
        bw_weight_s=lerp(a.bw_weight_s, c.bw_weight_s),
        recompute_s=lerp_modes(a.recompute_s, c.recompute_s),
        activation_bytes=lerp_modes(a.activation_bytes, c.activation_bytes),
        param_bytes=a.param_bytes,
        param_count=a.param_count,
        output_bytes=lerp(a.output_bytes, c.output_bytes),
        tp_comm_bytes=lerp(a.tp_comm_bytes, c.tp_comm_bytes),
        fw_flops=lerp(a.fw_flops, c.fw_flops),
        split_bw_input_s=None
        if a.split_bw_input_s is None or c.split_bw_input_s is None
        else lerp(a.split_bw_input_s, c.split_bw_input_s),
        split_bw_weight_s=None
        if a.split_bw_weight_s is None or c.split_bw_weight_s is None
        else lerp(a.split_bw_weight_s, c.split_bw_weight_s),
    )


def _scale(c: LayerCost, f: float, *, params_too: bool) -> LayerCost:
    """Scale the micro-batch-dependent parts by f (and the parameters too, for a tp change)."""
    a = c.activation_bytes
    act = ModeValues(none=a.none * f, selective=a.selective * f, full=a.full * f)
    return c.times_scaled(f).model_copy(
        update={
            "activation_bytes": act,
            "param_bytes": c.param_bytes * f if params_too else c.param_bytes,
            "param_count": c.param_count * f if params_too else c.param_count,
            "output_bytes": c.output_bytes * (1.0 if params_too else f),
            "tp_comm_bytes": c.tp_comm_bytes * (1.0 if params_too else f),
            "fw_flops": c.fw_flops * f,
        }
    )
