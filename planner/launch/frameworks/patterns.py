"""Recompute and stage-split patterns that frameworks name with a flag, found in a plan.

Each finder returns what it found or the precise reasons it found nothing, naming the stage and
the layer (by the profile's layer names) where the plan departs from what the flag expresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.launch.layers import StageLayers
from planner.specs.base import RecomputeMode


@dataclass(frozen=True)
class RecomputePattern:
    """`uniform`: one mode for every decoder block. `block`: the first `k` decoder blocks of each
    stage fully recomputed and the rest not (Megatron's `--recompute-method block`)."""

    kind: str  # "uniform" | "block"
    mode: RecomputeMode  # the uniform mode; "full" for block
    block_layers: int = 0


def _decoder_name(stage: StageLayers, i: int) -> str:
    return f"decoder.{stage.first_decoder + i}"


def describe(stage: StageLayers) -> str:
    first, end = stage.layers
    return f"stage {stage.index} (layers [{first}, {end}), {stage.decoders} decoder blocks)"


def uniform_mode(stages: tuple[StageLayers, ...]) -> RecomputeMode | None:
    modes = {m for s in stages for m in s.decoder_recompute}
    if len(modes) == 1:
        return next(iter(modes))
    return "none" if not modes else None


def mixed_modes_reason(stages: tuple[StageLayers, ...], framework_says: str) -> str:
    """Name the first two decoder blocks whose recompute modes differ."""
    seen: dict[RecomputeMode, str] = {}
    for s in stages:
        for i, mode in enumerate(s.decoder_recompute):
            seen.setdefault(mode, _decoder_name(s, i))
    parts = ", ".join(f"{name} is {mode!r}" for mode, name in seen.items())
    return f"per-layer recompute differs between decoder blocks ({parts}); {framework_says}"


def block_pattern(stages: tuple[StageLayers, ...]) -> tuple[int | None, list[str]]:
    """k when every stage fully recomputes exactly its first min(k, n) decoder blocks."""
    reasons: list[str] = []
    k = 0
    for s in stages:
        modes = s.decoder_recompute
        bad = [i for i, m in enumerate(modes) if m not in ("none", "full")]
        if bad:
            reasons.append(
                f"{describe(s)}: {_decoder_name(s, bad[0])} is {modes[bad[0]]!r}, and block "
                f"recompute only mixes 'full' and 'none'"
            )
            continue
        prefix = next((i for i, m in enumerate(modes) if m != "full"), len(modes))
        tail = [i for i in range(prefix, len(modes)) if modes[i] == "full"]
        if tail:
            reasons.append(
                f"{describe(s)}: {_decoder_name(s, tail[0])} is 'full' after "
                f"{_decoder_name(s, prefix)} is 'none'; block recompute checkpoints only the "
                f"first decoder blocks of a stage"
            )
        k = max(k, prefix)
    if reasons:
        return None, reasons
    for s in stages:
        prefix = sum(1 for m in s.decoder_recompute if m == "full")
        if prefix != min(k, s.decoders):
            reasons.append(
                f"{describe(s)} recomputes its first {prefix} decoder blocks where another stage "
                f"recomputes {k}; block recompute uses one count (--recompute-num-layers) for "
                f"every stage"
            )
    return (None, reasons) if reasons else (k, [])


def per_rank_counts(counts: list[int], pp: int) -> tuple[list[int] | None, list[str]]:
    """Decoder blocks per virtual stage, when all chunks of each pipeline rank hold the same
    number (looped placement: stage i on rank i % pp); else the reasons."""
    reasons = []
    per_rank: list[int] = []
    for r in range(pp):
        mine = counts[r::pp]
        if len(set(mine)) > 1:
            reasons.append(
                f"pipeline rank {r} holds stages {list(range(r, len(counts), pp))} with "
                f"{mine} decoder blocks; every chunk of a rank must hold the same number"
            )
        per_rank.append(mine[0])
    return (None, reasons) if reasons else (per_rank, [])
