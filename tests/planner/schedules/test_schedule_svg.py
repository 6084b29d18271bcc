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
