"""score_split's per-layer sums and per-rank peaks in C (planner/cost/_sums.c) against the
Python code: the same floats, bit for bit, on random partitions of random inputs; bad tables
are refused."""

from __future__ import annotations

import dataclasses
import random
from array import array

import pytest

from planner.cost import PartitionInputs
from planner.cost import score as score_module
from planner.cost.score import _stage_sums, rank_peaks, stage_sums_python
from planner.specs.base import RecomputeMode
from tests.planner.search.cases import mixed_case, pipeline_inputs

MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")

pytestmark = pytest.mark.skipif(score_module._sums is None, reason="C sums not built")


@pytest.mark.parametrize("seed", range(40))
def test_c_sums_equal_the_python_loop(seed: int) -> None:
    rng, inputs = mixed_case(24_000, seed)
    n, n_st = inputs.num_layers, inputs.num_stages
    for _ in range(10):
        cuts = sorted(rng.sample(range(1, n), n_st - 1))
        bounds = (0, *cuts, n)
        modes = tuple(rng.choice(MODES) for _ in range(n))
        c = _stage_sums(inputs, bounds, modes)
        py = stage_sums_python(inputs, bounds, modes)
        assert [list(v) for v in c] == [list(v) for v in py]


def test_c_sums_refuse_bad_tables() -> None:
    _, inputs = mixed_case(24_000, 1)
    n, n_st, pp = inputs.num_layers, inputs.num_stages, inputs.pp
    layers, ranks, inflight = score_module._tables(inputs)
    assert score_module._sums is not None
    sums = score_module._sums.sums
    out = array("d", bytes(8 * (5 * n_st + 2 * pp)))
    good = array("i", [0, *range(n - n_st + 1, n), n])
    with pytest.raises(ValueError, match="mode"):
        sums(layers, bytes([3] * n), good, ranks, inflight, pp, 0.0, 0.0, 0.0, 0.0, out)
    with pytest.raises(ValueError, match="bounds"):
        sums(
            layers,
            bytes(n),
            array("i", [0] * (n_st + 1)),
            ranks,
            inflight,
            pp,
            0.0,
            0.0,
            0.0,
            0.0,
            out,
        )
    with pytest.raises(ValueError, match="size"):
        sums(layers, bytes(n), good, ranks, inflight, pp, 0.0, 0.0, 0.0, 0.0, array("d"))


def peak_case(seed: int) -> tuple[random.Random, PartitionInputs]:
    """Inputs on a real schedule with up to 4 chunks per rank (ranks with many held points),
    three distinct modes, a loss temporary, fragmentation, with or without the recompute
    transient, and (one case in five) without held points (every stage at its peak)."""
    rng = random.Random(31_000 + seed)
    schedule, vpp = rng.choice(
        [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1), ("zbv", 2)]
        + [("interleaved-1f1b", v) for v in (2, 3, 4)]
    )
    pp = rng.choice([2, 3, 4]) if vpp > 1 else rng.choice([1, 2, 3, 5])
    m = rng.choice([pp, 2 * pp, 3 * pp + 1 if schedule in ("1f1b", "gpipe", "zbv") else 4 * pp])
    n = rng.randint(pp * vpp, pp * vpp + 6)
    fw = tuple(rng.uniform(0.1, 2.0) for _ in range(n))
    bw = tuple((b, b * rng.uniform(1.0, 1.2), b * 1.3) for b in (rng.uniform(0.1, 2) for _ in fw))
    act = tuple((a, a * rng.uniform(0.3, 0.9), a * 0.1) for a in (rng.uniform(1, 4) for _ in fw))
    base = pipeline_inputs(
        schedule,  # type: ignore[arg-type]
        pp,
        vpp,
        m,
        fw=fw,
        bw_input=bw,
        bw_weight=tuple(rng.uniform(0, 1) for _ in fw),
        p2p=tuple(rng.uniform(0, 0.5) for _ in fw),
        act=act,
        static=tuple(rng.uniform(1, 5) for _ in fw),
        post=tuple(rng.uniform(0, 0.3) for _ in fw),
        cap=1e9,
        modes=MODES,
    )
    return rng, dataclasses.replace(
        base,
        loss_bytes=rng.choice([0.0, rng.uniform(0.5, 6.0)]),
        fragmentation_fraction=rng.choice([0.0, 0.1]),
        recompute_transient=rng.random() < 0.8,
        held_points=() if rng.random() < 0.2 else base.held_points,
    )


@pytest.mark.parametrize("seed", range(60))
def test_c_score_equals_the_python_path(seed: int) -> None:
    """The C score (sums, transients, per-rank peaks and memory) gives the Python path's
    floats and the same peak points, bit for bit."""
    rng, inputs = peak_case(seed)
    n, n_st = inputs.num_layers, inputs.num_stages
    for _ in range(12):
        cuts = sorted(rng.sample(range(1, n), n_st - 1))
        bounds = (0, *cuts, n)
        modes = tuple(rng.choice(MODES) for _ in range(n))
        fw, bw, w, p2p, act, post, memory, peaks = score_module._score_sums(inputs, bounds, modes)
        *want, static = stage_sums_python(inputs, bounds, modes)
        want_peaks = rank_peaks(inputs, bounds, modes, want[4])
        assert [list(v) for v in (fw, bw, w, p2p, act, post)] == [list(v) for v in want]
        assert peaks == want_peaks
        assert list(memory) == [m + p.total_bytes for m, p in zip(static, want_peaks, strict=True)]


def test_c_score_refuses_bad_point_tables() -> None:
    _, inputs = peak_case(3)
    n, n_st, pp = inputs.num_layers, inputs.num_stages, inputs.pp
    layers, ranks, _ = score_module._tables(inputs)
    points, ranges, stages, offsets = score_module._point_table(inputs)
    assert score_module._sums is not None
    bounds = array("i", [0, *range(n - n_st + 1, n), n])

    def call(points: array[int], ranges: array[int], stages: array[int]) -> None:
        out, best = array("d", bytes(8 * (5 * n_st + 6 * pp))), array("i", bytes(4 * pp))
        args = (0.0, 0.0, 0.0, 0.0, points, ranges, stages, offsets, n_st - 1, 0.0, 0.0, True)
        score_module._sums.score(layers, bytes(n), bounds, ranks, pp, *args, out, best)  # type: ignore[union-attr]

    call(points, ranges, stages)  # the good tables pass
    with pytest.raises(ValueError, match="out of range"):
        call(points, array("i", [0, 10**6] * pp), stages)
    with pytest.raises(ValueError, match="no stage"):
        call(points, ranges, array("i", [n_st] * len(stages)))
    with pytest.raises(ValueError, match="not valid"):
        call(array("i", [n_st] * len(points)), ranges, stages)
