"""The timeline SVG parses, has one box per action, to scale, coloured by kind."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedules import (
    StageDurations,
    generate,
    rank_peak_inflight,
    render_timeline_svg,
    simulate,
)

NS = "{http://www.w3.org/2000/svg}"


def render(name: str, pp: int, vpp: int, m: int, title: str = "") -> tuple[ET.Element, float]:
    schedule = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
    stages = pp * vpp
    durations = StageDurations(
        (0.01,) * stages, (0.02,) * stages, (0.008,) * stages, (0.0,) * stages
    )
    sim = simulate(schedule, durations)
    return ET.fromstring(render_timeline_svg(schedule, sim, title=title)), sim.step_time_s


@pytest.mark.parametrize(
    ("name", "vpp", "per_mb"),
    [("gpipe", 1, 2), ("1f1b", 1, 2), ("interleaved-1f1b", 2, 2), ("zb-h1", 1, 3), ("zbv", 2, 3)],
)
def test_one_box_per_action_with_distinct_colours(name: str, vpp: int, per_mb: int) -> None:
    root, _ = render(name, 4, vpp, 8)
    boxes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "action"]
    assert len(boxes) == per_mb * 4 * vpp * 8
    colour_of: dict[str, set[str | None]] = {}
    for box in boxes:
        kind = "".join(c for c in box.get("data-action", "") if c.isalpha())
        colour_of.setdefault(kind, set()).add(box.get("fill"))
    assert all(len(c) == 1 for c in colour_of.values())  # one colour per kind
    fills = [next(iter(c)) for c in colour_of.values()]
    assert len(set(fills)) == len(fills)  # distinct kinds, distinct colours
    lanes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "lane"]
    assert len(lanes) == 4


@settings(max_examples=20, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 12))
def test_boxes_are_to_scale(p: int, m: int) -> None:
    root, step_s = render("1f1b", p, 1, m)
    lanes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "lane"]
    left, plot_px = float(lanes[0].get("x", 0)), float(lanes[0].get("width", 0))
    boxes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "action"]
    for box in boxes:
        width = float(box.get("width", 0))
        expected_s = 0.01 if "F" in box.get("data-action", "") else 0.02
        assert width == pytest.approx(expected_s / step_s * plot_px, abs=0.01)
        assert float(box.get("x", 0)) >= left - 1e-6
        assert float(box.get("x", 0)) + width <= left + plot_px + 0.02
    # idle time stays empty: on each lane the boxes cover exactly busy time
    covered = sum(float(b.get("width", 0)) for b in boxes)
    assert covered == pytest.approx(p * m * 0.03 / step_s * plot_px, abs=0.006 * len(boxes))


def test_title_is_escaped_and_axis_in_ms() -> None:
    root, _ = render("1f1b", 2, 1, 4, title="a < b & c")
    texts = ["".join(t.itertext()) for t in root.iter(f"{NS}text")]
    assert "a < b & c" in texts
    assert "time (ms)" in texts
    assert "forward (F)" in texts and "backward (B)" in texts


def test_rank_peak_inflight_interleaved_first_rank() -> None:
    # Narayanan 2021 §2.2.2: first rank holds pp*(1 + (pp-1)/(pp*vpp)) micro-batches of layers.
    for p, v, m in ((4, 2, 8), (4, 2, 16), (8, 2, 16), (4, 4, 8)):
        schedule = generate("interleaved-1f1b", pp=p, vpp=v, num_microbatches=m)
        assert rank_peak_inflight(schedule)[0] / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


def _long_sim() -> tuple[object, object]:
    # A GPT-3 175B-shaped pipeline: 96 layers over pp=8 ranks x vpp=12 chunks, m=48 (Narayanan
    # 2021's 175B row at a global batch of 1536 over dp=32, micro-batch 1); stages differ a
    # little, as uneven layers and the embedding/LM head make them.
    pp, vpp, m = 8, 12, 48
    schedule = generate("interleaved-1f1b", pp=pp, vpp=vpp, num_microbatches=m)
    stages = pp * vpp
    fw = tuple(0.010 * (1.3 if s in (0, stages - 1) else 1.0) for s in range(stages))
    durations = StageDurations(fw, tuple(2 * f for f in fw), (0.0,) * stages, (0.0,) * stages)
    return schedule, simulate(schedule, durations)


def _panel(root: ET.Element, name: str) -> ET.Element:
    return next(g for g in root.iter(f"{NS}g") if g.get("data-panel") == name)


def _areas_s(root: ET.Element, cls: str, px_per_s: float, row_px: float) -> float:
    total = 0.0
    for r in root.iter(f"{NS}rect"):
        if r.get("class") == cls:
            total += float(r.get("width", 0)) * float(r.get("height", 0)) / row_px
    return total / px_per_s


def test_long_timeline_is_aggregated_bounded_and_exact() -> None:
    from planner.schedules.svg import TimelineStyle

    schedule, sim = _long_sim()
    actions = sum(len(r) for r in sim.timeline)  # type: ignore[attr-defined]
    assert actions == 2 * 8 * 12 * 48
    style = TimelineStyle()
    root = ET.fromstring(render_timeline_svg(schedule, sim))  # type: ignore[arg-type]
    rects = [r for r in root.iter(f"{NS}rect") if r.get("class") in ("action", "aggregate", "idle")]
    ranks = 8
    columns = style.plot_px / style.column_px + 2
    bound = 2 * style.full_limit + 2 * ranks + 2 * ranks * columns
    assert len(rects) <= bound
    assert len(rects) < actions / 2  # the full drawing had one box per action
    lanes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "lane"]
    plot_px, row_px = float(lanes[0].get("width", 0)), float(lanes[0].get("height", 0))
    step_s = sim.step_time_s  # type: ignore[attr-defined]
    px_per_s = plot_px / step_s
    busy = sum(sim.busy_s)  # type: ignore[attr-defined]
    overview = _panel(root, "overview")
    idle_s = _areas_s(overview, "idle", px_per_s, row_px)
    busy_s = _areas_s(overview, "aggregate", px_per_s, row_px)
    # The overview's idle equals the simulator's idle time and its busy the busy time (to the
    # 0.01 px the coordinates are printed with, per box).
    slack = 0.02 * len(rects) / px_per_s
    assert idle_s == pytest.approx(ranks * step_s - busy, abs=slack)
    assert busy_s == pytest.approx(busy, abs=slack)
    assert idle_s > 0  # warm-up and cool-down are idle on every interleaved rank but one
    # The warm-up and cool-down are drawn in full, each within the budget, with boxes wide
    # enough to see (the whole step's actions would be under a pixel each).
    for name in ("warm-up", "cool-down"):
        boxes = [r for r in _panel(root, name).iter(f"{NS}rect") if r.get("class") == "action"]
        assert 0 < len(boxes) <= style.full_limit // 2 + ranks
        widths = sorted(float(b.get("width", 0)) for b in boxes)
        assert widths[len(widths) // 2] >= 3.0
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{NS}text"))
    assert "aggregated" in texts and "idle" in texts


def test_later_chunks_never_fade_to_look_idle() -> None:
    schedule, sim = _long_sim()
    root = ET.fromstring(render_timeline_svg(schedule, sim))  # type: ignore[arg-type]
    opacities = [
        float(r.get("fill-opacity", 1))
        for r in root.iter(f"{NS}rect")
        if r.get("class") == "action"
    ]
    assert opacities and min(opacities) >= 0.45
    assert any(o == 1.0 for o in opacities)


def test_small_timeline_draws_every_idle_gap() -> None:
    schedule = generate("1f1b", pp=4, vpp=1, num_microbatches=8)
    durations = StageDurations((0.01,) * 4, (0.02,) * 4, (0.0,) * 4, (0.0,) * 4)
    sim = simulate(schedule, durations)
    root = ET.fromstring(render_timeline_svg(schedule, sim, predicted_step_s=0.5))
    lanes = [r for r in root.iter(f"{NS}rect") if r.get("class") == "lane"]
    plot_px, row_px = float(lanes[0].get("width", 0)), float(lanes[0].get("height", 0))
    px_per_s = plot_px / sim.step_time_s
    idle_s = _areas_s(_panel(root, "step"), "idle", px_per_s, row_px)
    assert idle_s == pytest.approx(4 * sim.step_time_s - sum(sim.busy_s), abs=1e-4)
    assert not [r for r in root.iter(f"{NS}rect") if r.get("class") == "aggregate"]
    texts = " ".join("".join(t.itertext()) for t in root.iter(f"{NS}text"))
    assert "predicted step 500 ms" in texts and "pipeline" in texts
