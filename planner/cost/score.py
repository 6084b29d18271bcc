"""Score one partition with the formulas of planner.cost.partition -- the single implementation
that `evaluate` and the search both call, so they can never disagree."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from planner.cost.memory import RankPeak, rank_activation_peak
from planner.cost.partition import MODE_INDEX, PartitionInputs
from planner.errors import SpecError
from planner.memo import PerObject
from planner.schedules import SimResult, generate, rank_stages, simulate_unchecked
from planner.schedules.ir import ActionKind
from planner.specs.base import RecomputeMode
from planner.specs.request import StageSpec

_sums: ModuleType | None
try:
    from planner.cost import _sums
except ImportError:  # not built (no compiler at install time): the Python loop
    _sums = None
if _sums is not None and not hasattr(_sums, "score"):  # built from an older _sums.c: rebuild
    _sums = None


@dataclass(frozen=True)
class PartitionScore:
    """Step time, bubble and per-rank memory of one partition (formulas in partition.py)."""

    step_time_s: float  # pipeline makespan + the largest per-rank post time
    pipeline_s: float  # simulator makespan
    post_s: float  # max over ranks of the summed per-layer post_s (DP sync + optimizer)
    bubble_fraction: float  # from the simulator
    rank_memory_bytes: tuple[float, ...]  # per pipeline rank
    stage_fw_s: tuple[float, ...]
    stage_bw_s: tuple[float, ...]
    stage_w_s: tuple[float, ...]
    stage_p2p_s: tuple[float, ...]
    stage_activation_bytes: tuple[float, ...]  # one micro-batch's activations per stage
    rank_post_s: tuple[float, ...]
    rank_peaks: tuple[RankPeak, ...]  # per rank: dynamic bytes at its timeline peak
    sim: SimResult
    cap_bytes: float

    @property
    def peak_memory_bytes(self) -> float:
        return max(self.rank_memory_bytes)

    @property
    def margin_bytes(self) -> float:
        return self.cap_bytes - self.peak_memory_bytes

    @property
    def feasible(self) -> bool:
        return self.margin_bytes >= 0


def stage_modes(stage: StageSpec) -> tuple[RecomputeMode, ...]:
    """The stage's per-layer recompute modes; `none` everywhere when left out."""
    if stage.recompute is not None:
        return stage.recompute
    none: tuple[RecomputeMode, ...] = ("none",)
    return none * stage.num_layers


def score_partition(
    inputs: PartitionInputs, stages: Sequence[StageSpec], *, with_timeline: bool = False
) -> PartitionScore:
    """Simulate the schedule over `stages` (layer ranges with per-layer recompute) and add the
    post-step and memory terms, exactly as the PartitionInputs docstring writes them.

    `stages[i].recompute` left out means `none` on every layer of the stage. Raises SpecError
    if the stages do not tile the layers.
    """
    x = inputs
    if len(stages) != x.num_stages:
        raise SpecError("stages", len(stages), f"needs pp*vpp = {x.num_stages} stages")
    bounds = [0]
    modes: list[RecomputeMode] = []
    for s, stage in enumerate(stages):
        first, end = stage.layers
        if first != bounds[-1] or end > x.num_layers:
            raise SpecError(
                f"stages[{s}].layers",
                stage.layers,
                f"must start at {bounds[-1]} and end by {x.num_layers}",
            )
        bounds.append(end)
        modes.extend(stage_modes(stage))
    if bounds[-1] != x.num_layers:
        raise SpecError(
            "stages",
            bounds[-1],
            f"stages end at layer {bounds[-1]}, the model has {x.num_layers}",
        )
    return score_split(inputs, bounds, modes, with_timeline=with_timeline)


def score_split(
    inputs: PartitionInputs,
    bounds: Sequence[int],
    modes: Sequence[RecomputeMode],
    *,
    with_timeline: bool = False,
) -> PartitionScore:
    """score_partition of stages given as boundaries (stage s holds layers bounds[s] ..
    bounds[s + 1] - 1, each stage non-empty, bounds[-1] = the layer count) and one mode per
    layer, unchecked: the search's form (it scores thousands of partitions)."""
    x = inputs
    if _sums is not None:
        fw, bw, w, p2p, act, post, memory, peaks = _score_sums(x, bounds, modes)
    else:
        fw, bw, w, p2p, act, post, static = stage_sums_python(x, bounds, modes)
        peaks = rank_peaks(x, bounds, modes, act)
        memory = [m + p.total_bytes for m, p in zip(static, peaks, strict=True)]
    schedule = generate(x.schedule, pp=x.pp, vpp=x.vpp, num_microbatches=x.num_microbatches)
    sim = simulate_unchecked(schedule, fw, bw, w, p2p, with_timeline=with_timeline)
    max_post = max(post)
    return PartitionScore(
        step_time_s=sim.step_time_s + max_post,
        pipeline_s=sim.step_time_s,
        post_s=max_post,
        bubble_fraction=sim.bubble_fraction,
        rank_memory_bytes=tuple(memory),
        stage_fw_s=tuple(fw),
        stage_bw_s=tuple(bw),
        stage_w_s=tuple(w),
        stage_p2p_s=tuple(p2p),
        stage_activation_bytes=tuple(act),
        rank_post_s=tuple(post),
        rank_peaks=peaks,
        sim=sim,
        cap_bytes=x.cap_bytes,
    )


def stage_sums_python(
    x: PartitionInputs, bounds: Sequence[int], modes: Sequence[RecomputeMode]
) -> tuple[Sequence[float], ...]:
    """Per stage fw, bw, w, p2p and activation bytes of one micro-batch, per rank post time
    and static memory bytes (fixed + params, grads, optimizer state): score_split's sums (in
    C where it was built: _stage_sums and _score_sums, the same additions in the same order,
    bit-identical)."""
    fw: list[float] = []
    bw: list[float] = []
    w: list[float] = []
    p2p: list[float] = []
    act: list[float] = []
    of, ob, ow = x.stage_overhead_s  # the runtime's fixed time per action (partition.py)
    fw_s, bw_in, bw_w, acts = x.fw_s, x.bw_input_s, x.bw_weight_s, x.activation_bytes
    post = [0.0] * x.pp
    memory = [x.fixed_bytes] * x.pp
    # stages hold consecutive layers, so each rank's post and static sums run in layer order
    # (the order is part of the result: floats); score_split adds the activation peaks
    for s, rank in enumerate(x.stage_rank):
        first, end = bounds[s], bounds[s + 1]
        f = b = ww = a = 0.0
        for layer in range(first, end):
            k = MODE_INDEX[modes[layer]]
            f += fw_s[layer]
            b += bw_in[layer][k] + bw_w[layer]
            ww += bw_w[layer]
            a += acts[layer][k]
            post[rank] += x.post_s[layer]
            memory[rank] += x.static_bytes[layer]
        fw.append(f + of)
        bw.append(b + ob)
        w.append(ww + ow)
        p2p.append(x.p2p_s[end - 1])
        act.append(a)
    return fw, bw, w, p2p, act, post, memory


def stage_recompute_bytes(
    x: PartitionInputs, bounds: Sequence[int], modes: Sequence[RecomputeMode]
) -> list[float]:
    """Per stage, the recompute transient of its backward: the largest act(none) - act(mode)
    over its recomputed layers (planner.cost.memory.MemoryTerms), 0 without recompute."""
    out = [0.0] * x.num_stages
    if not x.recompute_transient:
        return out
    kinds = bytes(map(MODE_INDEX.__getitem__, modes))
    if not any(kinds):
        return out
    per_mode = _TRANSIENTS.get(x, lambda: _transients(x))
    for s in range(x.num_stages):
        lo, hi = bounds[s], bounds[s + 1]
        seg = kinds[lo:hi]
        if seg.count(0) == hi - lo:
            continue
        if seg.count(seg[0]) == hi - lo:  # one mode on the whole stage
            out[s] = max(per_mode[seg[0]][lo:hi])
            continue
        out[s] = max(per_mode[k][i] for i, k in zip(range(lo, hi), seg, strict=True))
    return out


def _transients(x: PartitionInputs) -> tuple[list[float], ...]:
    """Per mode, per layer: act(none) - act(mode), what recomputing the layer holds again."""
    return tuple([a[0] - a[k] for a in x.activation_bytes] for k in range(3))


_TRANSIENTS: PerObject[tuple[list[float], ...]] = PerObject()


def rank_peaks(
    x: PartitionInputs,
    bounds: Sequence[int],
    modes: Sequence[RecomputeMode],
    stage_bytes: Sequence[float],
) -> tuple[RankPeak, ...]:
    """Each rank's dynamic bytes at the peak of its timeline (the memory term of the
    PartitionInputs docstring; planner.cost.memory.rank_activation_peak)."""
    recompute = stage_recompute_bytes(x, bounds, modes)
    last, loss, frag = x.num_stages - 1, x.loss_bytes, x.fragmentation_fraction
    if x.vpp == 1 and all(len(p) == 1 for p in x.rank_points):
        # one stage and one held point (its backward) per rank: rank_activation_peak, inlined
        out = []
        for (p,) in x.rank_points:
            s = p.stage
            held = p.counts[0] * stage_bytes[s]
            extra = max(loss if s == last else 0.0, recompute[s])
            out.append(RankPeak(held, extra, frag * (held + extra), p))
        return tuple(out)
    stages = rank_stages(x.stage_rank)
    return tuple(
        rank_activation_peak(
            points,
            stages[r],
            stage_bytes,
            recompute_bytes=recompute,
            loss_stage=last,
            loss_bytes=loss,
            fragmentation_fraction=frag,
        )
        for r, points in enumerate(x.rank_points)
    )


_LAYERS: PerObject[tuple[array[float], array[int], array[int]]] = PerObject()


def _stage_sums(
    x: PartitionInputs, bounds: Sequence[int], modes: Sequence[RecomputeMode]
) -> tuple[Sequence[float], ...]:
    """stage_sums_python in C (planner/cost/_sums.c)."""
    assert _sums is not None
    layers, ranks, inflight = _LAYERS.get(x, lambda: _tables(x))
    n_st, pp = x.num_stages, x.pp
    out = array("d", bytes(8 * (5 * n_st + 2 * pp)))
    of, ob, ow = x.stage_overhead_s
    kinds = bytes(map(MODE_INDEX.__getitem__, modes))
    _sums.sums(
        layers, kinds, array("i", bounds), ranks, inflight, pp, of, ob, ow, x.fixed_bytes, out
    )
    k = n_st
    return (
        out[:k],
        out[k : 2 * k],
        out[2 * k : 3 * k],
        out[3 * k : 4 * k],
        out[4 * k : 5 * k],
        out[5 * k : 5 * k + pp],
        out[5 * k + pp :],
    )


def _tables(x: PartitionInputs) -> tuple[array[float], array[int], array[int]]:
    """The C side's per-layer table (11 doubles per layer, _sums.c), stage ranks and in-flight
    counts (zeros), built once per PartitionInputs."""
    layers = array("d")
    for i in range(x.num_layers):
        bw, act = x.bw_input_s[i], x.activation_bytes[i]
        layers.extend((x.fw_s[i], *bw, x.bw_weight_s[i], *act, x.post_s[i]))
        layers.extend((x.static_bytes[i], x.p2p_s[i]))
    # in-flight counts 0: the C sums give the static bytes, score_split adds the peaks
    return layers, array("i", x.stage_rank), array("i", bytes(4 * x.num_stages))


_Scored = tuple[
    Sequence[float],
    Sequence[float],
    Sequence[float],
    Sequence[float],
    Sequence[float],
    Sequence[float],
    Sequence[float],
    tuple[RankPeak, ...],
]


def _score_sums(
    x: PartitionInputs, bounds: Sequence[int], modes: Sequence[RecomputeMode]
) -> _Scored:
    """stage_sums_python, rank_peaks and the per-rank memory in one C call (planner/cost/
    _sums.c `score`): (fw, bw, w, p2p, act per stage, post per rank, memory per rank,
    peaks per rank)."""
    assert _sums is not None
    layers, ranks, _ = _LAYERS.get(x, lambda: _tables(x))
    points, ranges, stages, offsets = _point_table(x)
    n_st, pp = x.num_stages, x.pp
    out = array("d", bytes(8 * (5 * n_st + 6 * pp)))
    best = array("i", bytes(4 * pp))
    of, ob, ow = x.stage_overhead_s
    kinds = bytes(map(MODE_INDEX.__getitem__, modes))
    _sums.score(
        layers,
        kinds,
        array("i", bounds),
        ranks,
        pp,
        of,
        ob,
        ow,
        x.fixed_bytes,
        points,
        ranges,
        stages,
        offsets,
        n_st - 1,
        x.loss_bytes,
        x.fragmentation_fraction,
        x.recompute_transient,
        out,
        best,
    )
    k, held = 5 * n_st, 5 * n_st + 2 * pp
    rank_points = x.rank_points
    peaks = tuple(
        RankPeak(
            out[held + 3 * r],
            out[held + 3 * r + 1],
            out[held + 3 * r + 2],
            rank_points[r][best[r]] if best[r] >= 0 else None,
        )
        for r in range(pp)
    )
    return (
        out[:n_st],
        out[n_st : 2 * n_st],
        out[2 * n_st : 3 * n_st],
        out[3 * n_st : 4 * n_st],
        out[4 * n_st : k],
        out[k : k + pp],
        out[held + 3 * pp :],
        peaks,
    )


_PointTable = tuple["array[int]", "array[int]", "array[int]", "array[int]"]
_POINT_TABLES: dict[int, tuple[object, _PointTable]] = {}
_POINT_TABLES_MAX = 4096  # as many as planner.schedules.held_points_of keeps


def _point_table(x: PartitionInputs) -> _PointTable:
    """The C side's table of the held points of `x` (_sums.c), per rank-points tuple: inputs of
    one schedule share theirs (planner.schedules.held_points_of), so it is keyed by that
    tuple's identity and holds the tuple itself (its id cannot be reused while cached);
    bounded, dropped whole when full. A race between threads builds a table twice, never a
    wrong one (a dict's get and set are atomic)."""
    points = x.rank_points
    single = x.vpp == 1 and all(len(p) == 1 for p in points)
    key = id(points) * 2 + single
    hit = _POINT_TABLES.get(key)
    if hit is not None and hit[0] is points:
        return hit[1]
    table = _build_point_table(x, single)
    if len(_POINT_TABLES) >= _POINT_TABLES_MAX:
        _POINT_TABLES.clear()
    _POINT_TABLES[key] = (points, table)
    return table


_PHASE_CODE = {ActionKind.W: 0, ActionKind.F: 1, ActionKind.B: 2}


def _build_point_table(x: PartitionInputs, single: bool) -> _PointTable:
    """Per point (stage, phase, total, counts...), per rank (first, count), the ranks' stages
    and their offsets. `single` (one stage and one point per rank): every point is charged as
    a backward, as rank_peaks' one-point rule does."""
    flat, ranges, stages, offsets = array("i"), array("i"), array("i"), array("i", [0])
    for r, (points, own) in enumerate(zip(x.rank_points, rank_stages(x.stage_rank), strict=True)):
        ranges.extend((len(flat), len(points)))
        for p in points:
            if len(p.counts) != len(own):
                raise ValueError(f"rank {r}: a point holds {len(p.counts)} counts, not {len(own)}")
            flat.extend((p.stage, 2 if single else _PHASE_CODE[p.phase], p.total, *p.counts))
        stages.extend(own)
        offsets.append(len(stages))
    return flat, ranges, stages, offsets
