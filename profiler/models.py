"""Reference GPT and Llama models in plain torch, built from a `planner.specs.ModelArch`.

The layer list matches the analytic catalog (`planner.catalog.models.layer_refs`):
`embedding` (tokens [b, s] -> hidden [b, s, h]), `num_layers` decoder blocks
(`decoder.{i}`: [b, s, h] -> [b, s, h]) and `head` (final norm, output projection and the mean
cross-entropy over tokens: (x, labels) -> scalar loss).

Definitions (the ones the analytic formulas count):
- gpt (Megatron GPT): learned token + position embeddings; pre-LayerNorm blocks with biases;
  attention q_proj/k_proj/v_proj/o_proj; MLP fc1 -> GELU -> fc2 (ffn = 4h by default);
  tied embeddings (see `Head`).
- llama: token embeddings only; RMSNorm; grouped-query attention (`num_kv_heads`) with rotary
  position embeddings; SwiGLU MLP gate_proj/up_proj/down_proj; no biases; untied by default.
- No dropout (runs are deterministic); attention is
  `torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`.

Tensor parallelism: attention reshapes with `-1` heads, so after torch's `parallelize_module`
(ColwiseParallel on q/k/v_proj, fc1, gate_proj, up_proj; RowwiseParallel on o_proj, fc2,
down_proj: see `TP_PLAN`) a block computes its local heads unchanged. `build_model(tp=t)` builds
instead the shapes ONE tp rank holds (heads/t, kv_heads/t, ffn/t, vocab/t rows of the embedding
and the output projection), which is what the per-layer profiler measures on one device.

Mixture of experts (`arch.moe`): the MoE layers' MLP is an `MoE` block: a `Router` (linear
h -> experts; softmax then top-k with the k weights renormalised, as Mixtral and Qwen3; or
sigmoid then top-k normalised, as DeepSeek-V3, whose selection adds a per-expert bias buffer
when `aux_loss_free`), top-k dispatch (the token copies sorted by expert), the experts (the
family's MLP, `experts.{j}`), and the weighted combine (index_add back to the tokens); shared
experts (`shared`, one MLP of n_s x moe_ffn) add to every token. A capacity factor drops a
token copy beyond ceil(c * T * k / E) per expert, in token order (GShard §2.2). Who runs the
experts is pluggable (`MoE.exchange`): `profiler.runner.expert` swaps in expert parallelism.
Attention uses `arch.head_size` per head (`head_dim`); MLA and sliding windows are not built
(the catalog counts them).

Context parallelism: `Attention.positions` (and `Embedding.positions`) hold the global
positions of the local tokens when a sequence is split; `Attention.exchange` replaces the
core with one that sees the other ranks' keys and values (`profiler.runner.context`).

Recompute: `set_recompute(block, mode)` with mode `none`, `selective` (Korthikanti et al. 2022:
checkpoint only the attention core softmax(QK^T)V) or `full` (checkpoint the whole block; only
its input is kept).
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointWrapper,
    checkpoint_wrapper,
)
from torch.utils.checkpoint import checkpoint

from planner.specs import ModelArch

__all__ = [
    "TP_PLAN",
    "Attention",
    "DecoderBlock",
    "Embedding",
    "Head",
    "MoE",
    "RecomputeMode",
    "ReferenceModel",
    "Router",
    "build_model",
    "recompute_mode",
    "set_recompute",
    "tiny_arch",
    "tiny_moe_arch",
    "unwrap",
]

RecomputeMode = Literal["none", "selective", "full"]

#: Module names inside a decoder block and the torch tensor-parallel style each takes
#: (`ColwiseParallel` for "colwise", `RowwiseParallel` for "rowwise"), per family.
TP_PLAN: dict[str, dict[str, Literal["colwise", "rowwise"]]] = {
    "gpt": {
        "attn.q_proj": "colwise",
        "attn.k_proj": "colwise",
        "attn.v_proj": "colwise",
        "attn.o_proj": "rowwise",
        "mlp.fc1": "colwise",
        "mlp.fc2": "rowwise",
    },
    "llama": {
        "attn.q_proj": "colwise",
        "attn.k_proj": "colwise",
        "attn.v_proj": "colwise",
        "attn.o_proj": "rowwise",
        "mlp.gate_proj": "colwise",
        "mlp.up_proj": "colwise",
        "mlp.down_proj": "rowwise",
    },
}

_INIT_STD = 0.02  # GPT-2 / Megatron default init std


def tiny_arch(family: Literal["gpt", "llama"] = "gpt", *, num_layers: int = 4) -> ModelArch:
    """A small model for tests: 4 layers, hidden 64, 4 heads (llama: 2 kv heads), vocab 128."""
    if family == "gpt":
        return ModelArch(
            family="gpt",
            name="tiny-gpt",
            num_layers=num_layers,
            hidden_size=64,
            num_attention_heads=4,
            vocab_size=128,
        )
    return ModelArch(
        family="llama",
        name="tiny-llama",
        num_layers=num_layers,
        hidden_size=64,
        num_attention_heads=4,
        num_kv_heads=2,
        ffn_hidden_size=128,
        vocab_size=128,
    )


def tiny_moe_arch(*, num_layers: int = 4, shared: int = 1) -> ModelArch:
    """A small Llama MoE for tests: tiny_arch('llama') with 4 experts of width 32, top-2,
    `shared` shared experts, the first layer dense, head_dim 32 (not hidden / heads = 16)."""
    return ModelArch(
        family="llama",
        name="tiny-moe",
        num_layers=num_layers,
        hidden_size=64,
        num_attention_heads=4,
        num_kv_heads=2,
        head_dim=32,
        ffn_hidden_size=128,
        vocab_size=128,
        moe={
            "num_experts": 4,
            "experts_per_token": 2,
            "moe_ffn_hidden_size": 32,
            "num_shared_experts": shared,
            "first_dense_layers": 1,
        },
    )


def _local(total: int, tp: int, what: str) -> int:
    if total % tp:
        raise ValueError(f"tp={tp} must divide {what}={total} (remainder {total % tp})")
    return total // tp


class Embedding(nn.Module):
    """tokens [b, s] (long) -> hidden [b, s, h]; gpt adds learned position embeddings.

    With a vocabulary split over tp ranks (`vocab_local < vocab_size`), token ids are folded
    into the local rows (`tokens % vocab_local`): the lookup costs what one rank's lookup costs.
    """

    position_ids: torch.Tensor

    def __init__(self, arch: ModelArch, *, seq_length: int, vocab_local: int) -> None:
        super().__init__()
        self.vocab_size = arch.vocab_size
        self.vocab_local = vocab_local
        self.tok = nn.Embedding(vocab_local, arch.hidden_size)
        self.pos: nn.Embedding | None = None
        self.positions: torch.Tensor | None = None  # global positions of the local tokens
        if arch.family == "gpt":
            self.pos = nn.Embedding(seq_length, arch.hidden_size)
            self.register_buffer("position_ids", torch.arange(seq_length), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.vocab_local != self.vocab_size:
            tokens = tokens.remainder(self.vocab_local)
        x: torch.Tensor = self.tok(tokens)
        if self.pos is not None:
            ids = self.position_ids[: tokens.shape[1]] if self.positions is None else self.positions
            x = x + self.pos(ids)
        return x


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021), Llama's half-split rotation."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, seq_length: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(seq_length, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: [b, heads, s, head_dim]; `positions` [s]: the tokens' places (default 0..s-1)."""
        s = x.shape[-2]
        cos, sin = self.cos, self.sin
        if positions is not None:
            cos, sin = cos[positions].to(x.dtype), sin[positions].to(x.dtype)
        elif cos.shape[0] != s or cos.dtype != x.dtype:
            cos, sin = cos[:s].to(x.dtype), sin[:s].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class CoreExchange(Protocol):
    """An attention core over a sequence split across ranks (profiler.runner.context)."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class ExpertExchange(Protocol):
    """Runs an MoE block's experts on its sorted token copies (profiler.runner.expert)."""

    def __call__(self, moe: MoE, inputs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor: ...


class Attention(nn.Module):
    """Multi-head (gpt) or grouped-query (llama) causal self-attention.

    Head counts are not stored: q/k/v are reshaped with `-1` heads from the local projection
    width and `head_dim`, so a tensor-parallel split of the projections just works.
    `checkpoint_core = True` runs the core softmax(QK^T)V under non-reentrant
    `torch.utils.checkpoint` (selective recompute).
    """

    def __init__(
        self,
        hidden: int,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        bias: bool,
        rotary: Rotary | None,
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.rotary = rotary
        self.checkpoint_core = False
        self.positions: torch.Tensor | None = None  # global positions of the local tokens
        self.exchange: CoreExchange | None = None

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, -1, self.head_dim).transpose(1, 2)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [b, s, h] -> q [b, heads, s, d], k and v [b, kv_heads, s, d] (rotary applied)."""
        q, k, v = (
            self._heads(self.q_proj(x)),
            self._heads(self.k_proj(x)),
            self._heads(self.v_proj(x)),
        )
        if self.rotary is not None:
            q, k = self.rotary(q, self.positions), self.rotary(k, self.positions)
        return q, k, v

    @staticmethod
    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(QK^T / sqrt(d)) V with a causal mask; grouped kv heads are shared."""
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.project(x)
        core = self.core if self.exchange is None else self.exchange
        if self.checkpoint_core and torch.is_grad_enabled():
            out = checkpoint(core, q, k, v, use_reentrant=False)
        else:
            out = core(q, k, v)
        out = out.transpose(1, 2).reshape(b, s, -1)
        result: torch.Tensor = self.o_proj(out)
        return result


class GeluMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x)))
        return out


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class Router(nn.Module):
    """Linear h -> experts, then the top-k experts of each token and their weights.

    softmax: probabilities over all experts in fp32, top-k, renormalised to sum 1 (Mixtral,
    Qwen3 `norm_topk_prob`). sigmoid: per-expert scores, top-k chosen on scores + `bias` (zero
    unless trained aux-loss-free, DeepSeek-V3 §2.1.2), weights the chosen scores normalised.
    """

    bias: torch.Tensor

    def __init__(self, hidden: int, experts: int, *, top_k: int, kind: str) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.top_k = top_k
        self.kind = kind
        self.register_buffer("bias", torch.zeros(experts), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, h] -> (weights [T, k] in x's dtype, expert indices [T, k])."""
        logits = self.gate(x).float()
        if self.kind == "softmax":
            scores = logits.softmax(dim=-1)
            top, idx = scores.topk(self.top_k, dim=-1)
        else:
            scores = logits.sigmoid()
            idx = (scores + self.bias).topk(self.top_k, dim=-1).indices
            top = scores.gather(-1, idx)
        weights = top / top.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), idx


class MoE(nn.Module):
    """Router, top-k dispatch, routed experts, weighted combine, and shared experts.

    The token copies are sorted by expert (a stable sort, so token order within an expert);
    `run_experts(inputs, counts)` runs expert j on its `counts[j]` consecutive rows: locally,
    or through `exchange` (expert parallelism) when set. `experts` is keyed by the global
    expert index; an expert-parallel rank holds only its own.
    """

    def __init__(self, arch: ModelArch) -> None:
        super().__init__()
        moe = arch.moe
        if moe is None:
            raise ValueError(f"{arch.display_name}: MoE needs arch.moe")
        h, f = arch.hidden_size, moe.moe_ffn_hidden_size
        self.num_experts = moe.num_experts
        self.top_k = moe.experts_per_token
        self.capacity_factor = moe.capacity_factor
        self.router = Router(h, moe.num_experts, top_k=moe.experts_per_token, kind=moe.router)
        self.experts = nn.ModuleDict(
            {str(j): _mlp(arch.family, h, f) for j in range(moe.num_experts)}
        )
        self.shared: nn.Module | None = None
        if moe.num_shared_experts:
            self.shared = _mlp(arch.family, h, f * moe.num_shared_experts)
        self.exchange: ExpertExchange | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, idx = self.router(flat)
        tokens = flat.shape[0]
        expert_of = idx.reshape(-1)
        token_of = torch.arange(tokens, device=x.device).repeat_interleave(self.top_k)
        weight_of = weights.reshape(-1)
        if self.capacity_factor is not None:
            keep = self._within_capacity(expert_of, tokens)
            expert_of, token_of, weight_of = expert_of[keep], token_of[keep], weight_of[keep]
        order = torch.argsort(expert_of, stable=True)
        expert_of, token_of, weight_of = expert_of[order], token_of[order], weight_of[order]
        counts = torch.bincount(expert_of, minlength=self.num_experts)
        outputs = self.run_experts(flat[token_of], counts)
        out = torch.zeros_like(flat).index_add(0, token_of, outputs * weight_of.unsqueeze(-1))
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.reshape(shape)

    def _within_capacity(self, expert_of: torch.Tensor, tokens: int) -> torch.Tensor:
        """Which token copies (token-major order) fit their expert's capacity."""
        assert self.capacity_factor is not None
        capacity = math.ceil(self.capacity_factor * tokens * self.top_k / self.num_experts)
        onehot = F.one_hot(expert_of, self.num_experts)
        place = (onehot.cumsum(dim=0) * onehot).sum(dim=-1)  # 1-based place in its expert
        return place <= capacity

    def run_experts(self, inputs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert j applied to its rows of `inputs` (grouped by expert, `counts[j]` each)."""
        if self.exchange is not None:
            return self.exchange(self, inputs, counts)
        return self.local_experts(inputs, counts, first=0)

    def local_experts(
        self, inputs: torch.Tensor, counts: torch.Tensor, *, first: int
    ) -> torch.Tensor:
        """Experts first, first + 1, ... on consecutive row groups of sizes `counts`."""
        chunks = torch.split(inputs, [int(n) for n in counts.tolist()])
        outs = [self.experts[str(first + j)](c) for j, c in enumerate(chunks)]
        return torch.cat(outs) if outs else inputs[:0]


def _mlp(family: str, hidden: int, ffn: int) -> nn.Module:
    return GeluMLP(hidden, ffn) if family == "gpt" else SwiGLU(hidden, ffn)


class DecoderBlock(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, arch: ModelArch, *, seq_length: int, tp: int, index: int = 0) -> None:
        super().__init__()
        h = arch.hidden_size
        head_dim = arch.head_size
        heads = _local(arch.num_attention_heads, tp, "num_attention_heads")
        kv_heads = _local(arch.kv_heads, tp, "num_kv_heads")
        ffn = _local(arch.ffn, tp, "ffn_hidden_size")
        self.family = arch.family
        self.mlp: nn.Module
        if arch.family == "gpt":
            self.attn_norm: nn.Module = nn.LayerNorm(h)
            self.mlp_norm: nn.Module = nn.LayerNorm(h)
            self.attn = Attention(
                h, heads=heads, kv_heads=kv_heads, head_dim=head_dim, bias=True, rotary=None
            )
            self.mlp = GeluMLP(h, ffn)
        else:
            self.attn_norm = nn.RMSNorm(h, eps=1e-5)
            self.mlp_norm = nn.RMSNorm(h, eps=1e-5)
            rotary = Rotary(head_dim, seq_length)
            self.attn = Attention(
                h, heads=heads, kv_heads=kv_heads, head_dim=head_dim, bias=False, rotary=rotary
            )
            self.mlp = SwiGLU(h, ffn)
        if arch.is_moe_layer(index):
            if tp > 1:
                raise ValueError(f"tp={tp}: the reference MoE block runs its experts whole")
            self.mlp = MoE(arch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        out: torch.Tensor = x + self.mlp(self.mlp_norm(x))
        return out


class Head(nn.Module):
    """Final norm, output projection and mean cross-entropy: (x [b, s, h], labels [b, s]) -> loss.

    Logits are upcast to fp32 before the loss (Korthikanti et al. 2022 count fp32 logits).
    The head always owns its projection weight. For tied embeddings (gpt) `build_model`
    initialises it equal to the token embedding; the two are separate parameters, so a
    training run that must keep them tied (both ends of a pipeline) has to all-reduce their
    gradients the way Megatron does: the plan runner handles that, profiling does not need it.
    With the vocabulary split over tp ranks, labels are folded into the local columns.
    """

    def __init__(self, arch: ModelArch, *, vocab_local: int) -> None:
        super().__init__()
        h = arch.hidden_size
        self.norm: nn.Module = nn.LayerNorm(h) if arch.family == "gpt" else nn.RMSNorm(h, eps=1e-5)
        self.proj = nn.Linear(h, vocab_local, bias=False)
        self.vocab_size = arch.vocab_size
        self.vocab_local = vocab_local

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.proj(self.norm(x)).float()
        if self.vocab_local != self.vocab_size:
            labels = labels.remainder(self.vocab_local)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


class ReferenceModel(nn.Module):
    """embedding -> decoder blocks -> head; `forward(tokens, labels)` returns the mean loss."""

    def __init__(self, arch: ModelArch, *, seq_length: int, tp: int = 1) -> None:
        super().__init__()
        if tp < 1:
            raise ValueError(f"tp={tp} must be >= 1")
        if arch.mla is not None or arch.sliding_window is not None:
            raise ValueError(
                f"{arch.display_name}: the reference model builds neither latent attention "
                "(mla) nor sliding windows; planner.catalog.moe counts them"
            )
        vocab_local = -(-arch.vocab_size // tp)  # Megatron pads the vocabulary to a multiple
        self.arch = arch
        self.seq_length = seq_length
        self.tp = tp
        self.embedding = Embedding(arch, seq_length=seq_length, vocab_local=vocab_local)
        self.layers = nn.ModuleList(
            DecoderBlock(arch, seq_length=seq_length, tp=tp, index=i)
            for i in range(arch.num_layers)
        )
        self.head = Head(arch, vocab_local=vocab_local)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        loss: torch.Tensor = self.head(x, labels)
        return loss

    def layer_list(self) -> list[nn.Module]:
        """[embedding, *layers, head]: the order of `planner.catalog.models.layer_refs`."""
        return [self.embedding, *self.layers, self.head]

    def layer_names(self) -> list[str]:
        n = len(self.layers)
        return ["embedding", *(f"decoder.{i}" for i in range(n)), "head"]


def _init_weights(model: ReferenceModel, seed: int) -> None:
    """Deterministic init from `seed`: normal(0, 0.02) weights, zero biases, unit norms;
    output projections of each residual branch with std 0.02/sqrt(2L) (GPT-2, Radford 2019)."""
    gen = torch.Generator().manual_seed(seed)
    resid_std = _INIT_STD / math.sqrt(2 * model.arch.num_layers)
    with torch.no_grad():
        for name, param in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if "norm" in name:
                param.fill_(1.0 if leaf == "weight" else 0.0)
            elif leaf == "bias":
                param.zero_()
            else:
                std = (
                    resid_std
                    if name.endswith(("o_proj.weight", "fc2.weight", "down_proj.weight"))
                    else _INIT_STD
                )
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * std)
        if model.arch.tied:
            model.head.proj.weight.copy_(model.embedding.tok.weight)


def build_model(
    arch: ModelArch,
    *,
    seq_length: int,
    tp: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> ReferenceModel:
    """Build the reference model (one tp rank's shapes when `tp > 1`), initialised from `seed`.

    The same (arch, seq_length, tp, seed) gives bit-identical parameters on every call and
    every process (initialised on CPU in fp32, then moved and cast).
    """
    if seq_length < 1:
        raise ValueError(f"seq_length={seq_length} must be >= 1")
    model = ReferenceModel(arch, seq_length=seq_length, tp=tp)
    _init_weights(model, seed)
    return model.to(device=device, dtype=dtype)


def unwrap(block: nn.Module) -> nn.Module:
    """The block inside a `checkpoint_wrapper`, or the block itself."""
    if isinstance(block, CheckpointWrapper):
        inner: nn.Module = block._checkpoint_wrapped_module
        return inner
    return block


def set_recompute(block: nn.Module, mode: RecomputeMode) -> nn.Module:
    """Configure a decoder block's activation recompute and return the module to call.

    - `none`: plain block.
    - `selective`: every `Attention` inside checkpoints its core (sets `checkpoint_core`);
      returns the same block.
    - `full`: the whole block is wrapped with torch's `checkpoint_wrapper` (non-reentrant);
      returns the wrapper (its state_dict keys are the block's own).
    Works on an already-wrapped block (it is unwrapped first). Blocks without attention
    (embedding, head, a user's layer) accept `none` and `full`; `selective` on them is a no-op.
    """
    if mode not in ("none", "selective", "full"):
        raise ValueError(f"recompute mode {mode!r} is not one of none, selective, full")
    inner = unwrap(block)
    for sub in inner.modules():
        if isinstance(sub, Attention):
            sub.checkpoint_core = mode == "selective"
    if mode == "full":
        return checkpoint_wrapper(inner)
    return inner


def recompute_mode(block: nn.Module) -> RecomputeMode:
    """The recompute mode a block is currently set to (inverse of `set_recompute`)."""
    if isinstance(block, CheckpointWrapper):
        return "full"
    if any(isinstance(m, Attention) and m.checkpoint_core for m in block.modules()):
        return "selective"
    return "none"
