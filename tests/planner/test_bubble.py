"""The bubble calculator: request validation, results against closed forms, table, target."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest
from pydantic import ValidationError

from planner.bubble import (
    BubbleRequest,
    bubble_calc,
    bubble_table,
    closed_form_bubble,
    smallest_microbatches,
    timeline_svg,
)
from planner.errors import SpecError


def test_one_number_means_every_stage_and_vpp_defaults() -> None:
    request = BubbleRequest(schedule="zbv", pp=3, num_microbatches=6, fw_s=1.0, bw_s=2.0, w_s=0.5)
    assert request.vpp == 2
    assert request.fw_s == (1.0,) * 6 and request.w_s == (0.5,) * 6
    assert request.p2p_s == (0.0,) * 5


def test_list_length_must_equal_pp_times_vpp() -> None:
    with pytest.raises(ValidationError) as info:
        BubbleRequest(
            schedule="interleaved-1f1b", pp=2, vpp=2, num_microbatches=4, fw_s=[1, 2, 3], bw_s=2
        )
    error = info.value.errors()[0]
    assert error["loc"] == ("fw_s",)
    assert "pp*vpp = 4" in error["msg"]


@pytest.mark.parametrize("value", [1.5e308, float("inf"), float("nan")])
def test_durations_are_finite_and_bounded(value: float) -> None:
    # Found by schemathesis: fw_s = 1.5e308 overflowed the step time to inf (JSON null).
    with pytest.raises(ValidationError) as info:
        BubbleRequest(schedule="zb-h1", pp=1, num_microbatches=2455, fw_s=value, bw_s=1e-5)
    assert info.value.errors()[0]["loc"][0] == "fw_s"


def test_the_longest_allowed_step_is_finite() -> None:
    result = bubble_calc(
        BubbleRequest(
            schedule="1f1b", pp=2, num_microbatches=64, fw_s=1e6, bw_s=1e6, p2p_s=1e6,
            include_timeline=False,
        )
    )  # fmt: skip
    assert 0 < result.step_time_s < float("inf")


def test_p2p_is_per_boundary() -> None:
    with pytest.raises(ValidationError, match=r"pp\*vpp - 1 = 3"):
        BubbleRequest(schedule="1f1b", pp=4, num_microbatches=4, fw_s=1, bw_s=1, p2p_s=[1] * 4)


def test_weight_grad_part_cannot_exceed_backward() -> None:
    with pytest.raises(ValidationError, match=r"w_s\[0\]=3.0 exceeds bw_s\[0\]=2.0"):
        BubbleRequest(schedule="zb-h1", pp=2, num_microbatches=4, fw_s=1, bw_s=2, w_s=3)


def test_unsupported_combination_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"vpp=1.*needs exactly vpp=2"):
        BubbleRequest(schedule="zbv", pp=2, vpp=1, num_microbatches=4, fw_s=1, bw_s=1)
    with pytest.raises(ValidationError, match="num_microbatches=9"):
        BubbleRequest(schedule="interleaved-1f1b", pp=4, num_microbatches=9, fw_s=1, bw_s=1)


def test_models_are_frozen() -> None:
    request = BubbleRequest(schedule="1f1b", pp=2, num_microbatches=2, fw_s=1, bw_s=1)
    with pytest.raises(ValidationError):
        request.pp = 3  # type: ignore[misc]


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (8, 3), (16, 64)])
def test_gpipe_and_1f1b_same_bubble_different_memory(pp: int, m: int) -> None:
    results = {
        name: bubble_calc(
            BubbleRequest(schedule=name, pp=pp, num_microbatches=m, fw_s=1.0, bw_s=2.0)
        )
        for name in ("gpipe", "1f1b")
    }
    expected = (pp - 1) / (m + pp - 1)
    for result in results.values():
        assert result.bubble_fraction == pytest.approx(expected)
        assert result.step_time_s == pytest.approx(3.0 * (m + pp - 1))
        assert result.closed_form_bubble_fraction == pytest.approx(expected)
    assert results["gpipe"].peak_inflight[0] == m
    assert results["1f1b"].peak_inflight[0] == min(pp, m)


def test_timeline_entries_are_per_rank_and_ordered() -> None:
    result = bubble_calc(
        BubbleRequest(schedule="1f1b", pp=3, num_microbatches=4, fw_s=[1, 2, 3], bw_s=2)
    )
    assert len(result.timeline) == 3
    assert [e.action for e in result.timeline[2]][:2] == ["2F0", "2B0"]
    for row in result.timeline:
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in itertools.pairwise(row))
    assert result.closed_form_bubble_fraction is None  # stages are not uniform
    lean = bubble_calc(
        BubbleRequest(
            schedule="1f1b", pp=3, num_microbatches=4, fw_s=1, bw_s=2, include_timeline=False
        )
    )
    assert lean.timeline == ()


def test_w_s_is_ignored_for_unsplit_schedules() -> None:
    base = dict(schedule="1f1b", pp=4, num_microbatches=8, fw_s=1.0, bw_s=2.0)
    plain = bubble_calc(BubbleRequest.model_validate(base))
    with_w = bubble_calc(BubbleRequest.model_validate({**base, "w_s": 1.0}))
    assert plain.step_time_s == with_w.step_time_s


def test_article_table_uses_corrected_formulas() -> None:
    table = bubble_table()
    assert len(table.rows) == 3 * 4 * 5
    for row in table.rows:
        p, m = row.pp, row.num_microbatches
        if row.schedule in ("gpipe", "1f1b"):
            assert row.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
        elif m % p == 0:
            assert row.bubble_fraction == pytest.approx((p - 1) / (2 * m + p - 1))
        if row.schedule == "gpipe":
            assert row.activation_microbatches == m
        if row.schedule == "1f1b":
            assert row.activation_microbatches == min(p, m)
        if row.schedule == "interleaved-1f1b" and m >= 2 * p:
            assert row.activation_microbatches == pytest.approx(p * (1 + (p - 1) / (2 * p)))


@pytest.mark.parametrize(("pp", "target"), [(2, 0.1), (4, 0.1), (8, 0.05), (16, 0.2)])
def test_smallest_microbatches_for_1f1b_matches_the_closed_form(pp: int, target: float) -> None:
    request = BubbleRequest(schedule="1f1b", pp=pp, num_microbatches=1, fw_s=1.0, bw_s=3.0)
    found = smallest_microbatches(request, target)
    # (p-1)/(m+p-1) <= t  <=>  m >= (p-1)(1-t)/t, smallest integer
    brute = next(m for m in range(1, 10_000) if (pp - 1) / (m + pp - 1) <= target + 1e-12)
    assert found.num_microbatches == brute
    assert found.bubble_fraction is not None and found.bubble_fraction <= target + 1e-12


def test_smallest_microbatches_interleaved_only_returns_accepted_m() -> None:
    request = BubbleRequest(schedule="interleaved-1f1b", pp=4, num_microbatches=4, fw_s=1, bw_s=2)
    found = smallest_microbatches(request, 0.05)
    m = found.num_microbatches
    assert m is not None and m % max(1, m // 4) == 0
    smaller = [k for k in range(1, m) if k % max(1, k // 4) == 0]
    for k in smaller:
        closed = closed_form_bubble("interleaved-1f1b", pp=4, vpp=2, m=k)
        assert closed is None or closed > 0.05
    assert found.bubble_fraction is not None and found.bubble_fraction <= 0.05


def test_target_not_reached_and_bad_target() -> None:
    request = BubbleRequest(schedule="1f1b", pp=8, num_microbatches=1, fw_s=1, bw_s=1)
    assert smallest_microbatches(request, 0.01, max_microbatches=64).num_microbatches is None
    with pytest.raises(SpecError, match="target_bubble_fraction"):
        smallest_microbatches(request, 1.5)


def test_timeline_svg_is_xml() -> None:
    request = BubbleRequest(schedule="zb-h1", pp=2, num_microbatches=4, fw_s=1, bw_s=2, w_s=1)
    root = ET.fromstring(timeline_svg(request, title="zb"))
    assert root.tag.endswith("svg")
