"""A framework-neutral view of what a plan (or a search candidate) asks a launcher for.

Stage layer ranges index the profile's layer list. For a built-in family that list is
`[embedding, decoder.0, ..., decoder.N-1, head]` (planner.catalog.models), so layer `i` is
decoder block `i - 1` for `1 <= i <= N`. Frameworks count decoder blocks per stage, so every
stage is mapped to the decoder blocks it holds and whether it holds the embedding or the head.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.plan import Plan
from planner.specs.base import RecomputeMode, ScheduleName
from planner.specs.model import ModelArch
from planner.specs.request import Candidate, StageSpec


@dataclass(frozen=True)
class StageLayers:
    """One stage, in decoder-block terms."""

    index: int
    layers: tuple[int, int]  # [first, end) over the profile's layer list
    first_decoder: int  # index of its first decoder block (0-based), valid if decoders > 0
    decoders: int  # decoder blocks it holds
    has_embedding: bool
    has_head: bool
    decoder_recompute: tuple[RecomputeMode, ...]  # one per decoder block it holds
    edge_recompute: tuple[tuple[str, RecomputeMode], ...]  # ("embedding"|"head", mode)


@dataclass(frozen=True)
class LaunchView:
    """The fields every emitter and capability check reads, from a Plan or a Candidate."""

    tp: int
    pp: int
    dp: int
    vpp: int
    schedule: ScheduleName
    micro_batch_size: int
    zero_stage: int
    sequence_parallel: bool
    recompute: RecomputeMode
    stages: tuple[StageSpec, ...] | None
    arch: ModelArch | None
    global_batch_size: int | None
    num_microbatches: int | None
    seq_length: int | None
    cp: int = 1
    ep: int = 1
    etp: int = 1
    cp_comm: str = "p2p"

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def num_decoders(self) -> int | None:
        """Decoder blocks of the model, from its shapes or (failing that) the stage list."""
        if self.arch is not None:
            return self.arch.num_layers
        if self.stages:
            return self.stages[-1].layers[1] - 2
        return None

    def stage_layers(self) -> tuple[StageLayers, ...] | None:
        """Each stage in decoder-block terms; None when the candidate leaves the split open."""
        n = self.num_decoders
        if self.stages is None or n is None:
            return None
        return tuple(_stage_layers(i, s, n, self.recompute) for i, s in enumerate(self.stages))


# What a Plan and a Candidate both carry, read the same way from either.
_SHARED_FIELDS = (
    "tp",
    "pp",
    "dp",
    "vpp",
    "schedule",
    "micro_batch_size",
    "zero_stage",
    "sequence_parallel",
    "recompute",
    "stages",
)
# Plan-only degrees (docs/moe.md): a Candidate does not carry them yet, so they read as 1.
_FOLDED_DEFAULTS = {"cp": 1, "ep": 1, "etp": 1, "cp_comm": "p2p"}


def view(
    source: Plan | Candidate,
    *,
    arch: ModelArch | None = None,
    global_batch_size: int | None = None,
    seq_length: int | None = None,
) -> LaunchView:
    """A LaunchView of a Plan, or of a Candidate plus what the search knows about the model."""
    shared = {name: getattr(source, name) for name in _SHARED_FIELDS}
    shared.update({name: getattr(source, name, d) for name, d in _FOLDED_DEFAULTS.items()})
    if isinstance(source, Plan):
        return LaunchView(
            **shared,
            arch=source.arch or arch,
            global_batch_size=source.global_batch_size,
            num_microbatches=source.num_microbatches,
            seq_length=source.seq_length,
        )
    m = None
    if global_batch_size is not None:
        per = source.dp * source.micro_batch_size
        m = global_batch_size // per if global_batch_size % per == 0 else None
    return LaunchView(
        **shared,
        arch=arch,
        global_batch_size=global_batch_size,
        num_microbatches=m,
        seq_length=seq_length,
    )


def _stage_layers(index: int, stage: StageSpec, n: int, default: RecomputeMode) -> StageLayers:
    first, end = stage.layers
    modes = stage.recompute or (default,) * (end - first)
    dec_first, dec_end = max(first, 1), min(end, n + 1)
    decoders = max(0, dec_end - dec_first)
    dec_modes = tuple(modes[i - first] for i in range(dec_first, dec_first + decoders))
    edges: list[tuple[str, RecomputeMode]] = []
    if first == 0:
        edges.append(("embedding", modes[0]))
    if end == n + 2:
        edges.append(("head", modes[-1]))
    return StageLayers(
        index=index,
        layers=(first, end),
        first_decoder=dec_first - 1,
        decoders=decoders,
        has_embedding=first == 0,
        has_head=end == n + 2,
        decoder_recompute=dec_modes,
        edge_recompute=tuple(edges),
    )
