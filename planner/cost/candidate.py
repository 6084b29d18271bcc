"""Validate a candidate against its request, and fill balanced stages when it has none.

Balanced stages (when `candidate.stages` is absent): the first layer of the model (the
embedding) joins the first stage and the last layer (the LM head + loss) joins the last stage,
as in Megatron-LM, which counts neither as a transformer layer; the layers in between (the
decoder blocks) are split evenly over the pp*vpp stages, and when they do not divide evenly the
extra ones go to stages 1, 2, ... (the first stage already carries the embedding). With fewer
middle layers than stages the whole layer list is split evenly instead. Every layer gets
`candidate.recompute`, except the embedding and head of an analytic family, which never
recompute (`none`).
"""

from __future__ import annotations

from planner.catalog.models import EMBEDDING, HEAD
from planner.cost.source import CostSource, resolve_costs
from planner.errors import SpecError
from planner.specs.base import RecomputeMode
from planner.specs.request import Candidate, PlanRequest, StageSpec

_NEVER_RECOMPUTE = frozenset({EMBEDDING, HEAD})


def balanced_bounds(num_layers: int, num_stages: int) -> tuple[tuple[int, int], ...]:
    """Stage layer ranges `[first, end)` by the rule in the module docstring.

    >>> balanced_bounds(10, 4)  # embedding, 8 decoders, head over 4 stages
    ((0, 3), (3, 5), (5, 7), (7, 10))
    """
    if not 0 < num_stages <= num_layers:
        raise ValueError(f"cannot split {num_layers} layers into {num_stages} stages")
    middle = num_layers - 2
    if middle >= num_stages:
        counts = [middle // num_stages] * num_stages
        for i in range(middle % num_stages):
            counts[1 + i] += 1
        counts[0] += 1
        counts[-1] += 1
    else:
        counts = [num_layers // num_stages] * num_stages
        for i in range(num_layers % num_stages):
            counts[i] += 1
    bounds: list[tuple[int, int]] = []
    first = 0
    for c in counts:
        bounds.append((first, first + c))
        first += c
    return tuple(bounds)


def _default_modes(
    source: CostSource, first: int, end: int, mode: RecomputeMode
) -> tuple[RecomputeMode, ...]:
    analytic = source.origin == "analytic"
    return tuple(
        "none" if analytic and source.layers[i].kind in _NEVER_RECOMPUTE else mode
        for i in range(first, end)
    )


def _check_folded(request: PlanRequest, c: Candidate) -> None:
    """Context and expert parallelism in context: 2 cp chunks of equal length per sequence
    (Megatron-Core's load-balanced split) and a fused attention kernel, ep only with experts
    and dividing them (megatron/core/transformer/moe/moe_layer.py), etp dividing the expert
    width."""
    s = request.training.seq_length
    if c.cp > 1 and s % (2 * c.cp):
        raise SpecError(
            "candidate.cp",
            c.cp,
            f"seq_length={s} must split into 2*cp = {2 * c.cp} equal chunks "
            f"(remainder {s % (2 * c.cp)})",
        )
    arch = request.arch
    if c.cp > 1 and arch is not None and not arch.fused_attention:
        raise SpecError(
            "candidate.cp",
            c.cp,
            f"context parallelism runs attention as a fused kernel (Megatron-Core: Transformer "
            f"Engine's); model {arch.display_name} has an unfused core (the gpt family's "
            f"default, Megatron-LM 2021): set model.attention_kernel to 'flash'",
        )
    if c.ep == 1 and c.etp == 1:
        return
    moe = arch.moe if arch is not None else None
    if moe is None:
        raise SpecError(
            "candidate.ep" if c.ep > 1 else "candidate.etp",
            c.ep if c.ep > 1 else c.etp,
            "expert parallelism needs an analytic model with moe (a measured profile is "
            "measured at ep = etp = 1)",
        )
    if moe.num_experts % c.ep:
        raise SpecError(
            "candidate.ep",
            c.ep,
            f"must divide moe.num_experts={moe.num_experts} (remainder {moe.num_experts % c.ep})",
        )
    if moe.moe_ffn_hidden_size % c.etp:
        raise SpecError(
            "candidate.etp",
            c.etp,
            f"must divide moe.moe_ffn_hidden_size={moe.moe_ffn_hidden_size}",
        )


def check_candidate(
    request: PlanRequest,
    candidate: Candidate,
    *,
    source: CostSource | None = None,
    fill_stages: bool = True,
) -> Candidate:
    """The candidate with stages (and per-layer recompute) filled in, checked in context.
    `fill_stages=False`: a candidate without stages is returned as it is, checked (for
    callers that never read its stages: planner.cost.partition_inputs; building one
    StageSpec per stage was a third of its cost).

    Raises SpecError naming the field and its value when the candidate does not fit the request.
    """
    src = source if source is not None else resolve_costs(request)
    c = candidate
    n = request.cluster.num_gpus
    if c.world_size != n:
        cp = f" * cp({c.cp})" if c.cp > 1 else ""
        raise SpecError(
            "candidate.tp*cp*pp*dp" if c.cp > 1 else "candidate.tp*pp*dp",
            c.world_size,
            f"tp({c.tp}){cp} * pp({c.pp}) * dp({c.dp}) = {c.world_size} != cluster.num_gpus({n})",
        )
    _check_folded(request, c)
    arch = request.arch
    if arch is not None:
        a, kv = arch.num_attention_heads, arch.kv_heads
        if a % c.tp or kv % c.tp:
            raise SpecError(
                "candidate.tp",
                c.tp,
                f"must divide num_attention_heads={a} and num_kv_heads={kv}",
            )
    g = request.cluster.gpus_per_node
    if n > g and (c.tp > g or g % c.tp) and not request.constraints.tp_across_nodes:
        raise SpecError(
            "candidate.tp",
            c.tp,
            f"the tensor-parallel group must sit within one node of {g} GPUs "
            "(set constraints.tp_across_nodes to allow otherwise)",
        )
    num_layers = len(src.layers)
    if c.num_stages > num_layers:
        raise SpecError(
            "candidate.vpp" if c.vpp > 1 else "candidate.pp",
            c.vpp if c.vpp > 1 else c.pp,
            f"pp({c.pp}) * vpp({c.vpp}) = {c.num_stages} stages exceed the model's "
            f"{num_layers} layers",
        )
    b = request.training.global_batch_size
    per = c.dp * c.micro_batch_size
    if b % per:
        raise SpecError(
            "training.global_batch_size",
            b,
            f"not divisible by dp({c.dp}) * micro_batch_size({c.micro_batch_size}) = {per}",
        )
    m = b // per
    if c.schedule == "interleaved-1f1b" and m % max(1, m // c.pp):
        raise SpecError(
            "candidate.micro_batch_size",
            c.micro_batch_size,
            f"interleaved-1f1b needs m % max(1, m // pp) == 0 (torch's Interleaved1F1B); "
            f"m={m}, pp={c.pp}",
        )
    if c.schedule == "zbv" and c.vpp != 2:
        raise SpecError("candidate.vpp", c.vpp, "schedule 'zbv' needs exactly 2 chunks per rank")
    if c.stages is None and not fill_stages:
        return c
    if c.stages is None:
        stages = tuple(
            StageSpec(layers=(lo, hi), recompute=_default_modes(src, lo, hi, c.recompute))
            for lo, hi in balanced_bounds(num_layers, c.num_stages)
        )
        return c.model_copy(update={"stages": stages})
    end = c.stages[-1].layers[1]
    if end != num_layers:
        raise SpecError(
            "candidate.stages",
            end,
            f"the last stage ends at layer {end}; the model has {num_layers} layers",
        )
    if all(s.recompute is not None for s in c.stages):
        return c
    filled = tuple(
        s
        if s.recompute is not None
        else StageSpec(
            layers=s.layers, recompute=_default_modes(src, s.layers[0], s.layers[1], c.recompute)
        )
        for s in c.stages
    )
    return c.model_copy(update={"stages": filled})
