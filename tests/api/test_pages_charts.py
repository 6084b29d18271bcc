"""The plan page's charts: round axis ticks on real values, labels clear of the cap line, the
trade-off chart's cap and chosen plan (SVG read back as XML)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from api.pages.charts import (
    FONT_PX,
    Point,
    clear_of_line,
    memory_chart_svg,
    nice_step,
    nice_ticks,
    tradeoff_chart_svg,
)
from planner.catalog.presets import PRESETS
from planner.cost import fixed_plan
from planner.plan import Plan
from planner.specs import Candidate, PlanRequest

GIB = 1024**3
NS = {"s": "http://www.w3.org/2000/svg"}


def _round(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m, rel_tol=1e-9) for m in (1, 2, 5, 10))


def _plan(preset: str, gpus: int, batch: int, cand: dict[str, object], cap: float | None) -> Plan:
    doc: dict[str, object] = {
        "model": PRESETS[preset].model_dump(mode="json"),
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": gpus},
        "training": {"global_batch_size": batch, "seq_length": 2048},
    }
    if cap is not None:
        doc["constraints"] = {"memory_cap_gib": cap}
    return fixed_plan(PlanRequest.model_validate(doc), Candidate.model_validate(cand))


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.0, 84.0, [0, 20, 40, 60, 80, 100]),  # an 80 GiB cap plus 5 % headroom
        (0.0, 148.05, [0, 50, 100, 150]),  # H200-SXM-141GB plus 5 %
        (19.34, 19.792, [19.3, 19.4, 19.5, 19.6, 19.7, 19.8]),  # 175B: timeline vs prediction
        (0.000747, 0.000794, [0.00074, 0.00075, 0.00076, 0.00077, 0.00078, 0.00079, 0.0008]),
    ],
)
def test_ticks_are_round_and_cover_the_range(lo: float, hi: float, expected: list[float]) -> None:
    ticks = nice_ticks(lo, hi)
    assert ticks == pytest.approx(expected)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert _round(ticks[1] - ticks[0])


def test_ticks_are_round_on_the_peak_memory_of_real_plans() -> None:
    # the peak memory per GPU of real plans (GiB), the ranges the memory chart draws
    for preset, gpus, batch, cand in (
        ("megatron-gpt-1.7b", 32, 512, {"tp": 1, "pp": 2, "dp": 16, "schedule": "1f1b"}),
        (
            "gpt-3-175b",
            1024,
            1536,
            {"tp": 8, "pp": 16, "dp": 8, "vpp": 3, "schedule": "interleaved-1f1b"},
        ),
    ):
        plan = _plan(preset, gpus, batch, {**cand, "recompute": "full"}, None)
        peak = plan.prediction.peak_memory_bytes / GIB
        ticks = nice_ticks(0, peak)
        step = ticks[1] - ticks[0]
        assert 3 <= len(ticks) <= 8 and _round(step) and step == nice_step(peak, 5), ticks
        assert all(math.isclose(t / step, round(t / step), abs_tol=1e-9) for t in ticks), ticks
        assert ticks[-1] >= peak > ticks[-2], (peak, ticks)


def _texts(svg: str) -> list[tuple[str, float, str]]:
    root = ET.fromstring(svg)
    return [
        (t.get("class") or "", float(t.get("y", "0")), "".join(t.itertext()))
        for t in root.iter("{http://www.w3.org/2000/svg}text")
    ]


def _cap_y(svg: str) -> float:
    root = ET.fromstring(svg)
    line = next(x for x in root.iter("{http://www.w3.org/2000/svg}line") if x.get("class") == "cap")
    return float(line.get("y1", "nan"))


@pytest.mark.parametrize("headroom_gib", [0.02, 0.1, 0.3, -0.05, -0.2, 8.0])
def test_memory_labels_never_cross_the_cap_line(headroom_gib: float) -> None:
    """A cap just above or just below the tallest bar puts its total label on the line."""
    cand = {"tp": 1, "pp": 2, "dp": 16, "schedule": "1f1b", "recompute": "full"}
    peak = _plan("megatron-gpt-1.7b", 32, 512, cand, None).prediction.peak_memory_bytes / GIB
    plan = _plan("megatron-gpt-1.7b", 32, 512, cand, round(peak + headroom_gib, 3))
    svg = memory_chart_svg(plan.prediction)
    cap_y = _cap_y(svg)
    totals = [(y, text) for cls, y, text in _texts(svg) if cls == "total"]
    assert len(totals) == 2
    for y, text in totals:
        assert not (y - FONT_PX - 1 <= cap_y <= y + 4), (text, y, cap_y)
    # the cap's label and the legend do not overlap either
    label_y = next(y for cls, y, _ in _texts(svg) if cls == "cap-label")
    legend = [y for cls, y, _ in _texts(svg) if cls == "" and not _.startswith("rank")]
    assert all(abs(y - label_y) >= FONT_PX + 2 for y in legend), (label_y, legend)


def test_memory_axis_ticks_are_round_gib() -> None:
    cand = {"tp": 1, "pp": 2, "dp": 16, "schedule": "1f1b", "recompute": "full"}
    svg = memory_chart_svg(_plan("megatron-gpt-1.7b", 32, 512, cand, None).prediction)
    ticks = [float(text) for cls, _, text in _texts(svg) if cls == "tick"]
    assert ticks == [0, 20, 40, 60, 80, 100]  # the 80 GiB cap is the tallest thing


def test_clear_of_line_moves_a_label_only_when_it_crosses() -> None:
    assert clear_of_line(100.0, 40.0, 104.0) == 100.0  # far from the line: unchanged
    moved = clear_of_line(100.0, 95.0, 104.0)  # bar top just under the line
    assert moved == 90.0 and not (moved - FONT_PX - 1 <= 95.0 <= moved + 4)
    moved = clear_of_line(100.0, 100.0, 104.0)  # the line through the label's baseline
    assert moved == 95.0 and not (moved - FONT_PX - 1 <= 100.0 <= moved + 4)
    assert clear_of_line(92.0, 97.0, 96.0) == 92.0  # a bar over the cap: label above both


def test_tradeoff_chart_marks_the_chosen_plan_and_the_cap() -> None:
    points = [
        Point("a", 3.72, 15.3 * GIB, "/plans/p/alternatives/0", tag="#1"),
        Point("b", 3.95, 12.1 * GIB, "/plans/p/alternatives/1", tag="#2"),
        Point("chosen", 3.61, 17.0 * GIB, None, chosen=True),
    ]
    svg = tradeoff_chart_svg(points, 80 * GIB)
    root = ET.fromstring(svg)
    circles = list(root.iter("{http://www.w3.org/2000/svg}circle"))
    assert [c.get("class") for c in circles] == ["alt", "alt", "chosen"]
    links = [a.get("href") for a in root.iter("{http://www.w3.org/2000/svg}a")]
    assert links == ["/plans/p/alternatives/0", "/plans/p/alternatives/1"]
    assert [t for c, _, t in _texts(svg) if c == "alt-tag"] == ["#1", "#2"]  # the table's rows
    xticks = [float(t) for c, _, t in _texts(svg) if c == "xtick"]
    assert xticks[0] <= 12.1 and xticks[-1] >= 80 and _round(xticks[1] - xticks[0])
    cap = next(x for x in root.iter("{http://www.w3.org/2000/svg}line") if x.get("class") == "cap")
    assert cap.get("x1") == cap.get("x2")  # a vertical line at the cap
    assert any(t == "cap 80.0 GiB" for _, _, t in _texts(svg))
