"""Measured split-backward times (LayerCost.split_bw_*) between and beyond profile points:
interpolated and scaled like the other times, and absent wherever one side lacks them."""

from __future__ import annotations

import pytest

from planner.specs.model import LayerCost, LayerRef, ModelProfile, ModeValues, ProfilePoint


def cost(scale: float, split: tuple[float, float] | None) -> LayerCost:
    zero = ModeValues(none=0.0, selective=0.0, full=0.0)
    return LayerCost(
        fw_s=1.0 * scale,
        bw_input_s=1.0 * scale,
        bw_weight_s=1.0 * scale,
        recompute_s=zero,
        activation_bytes=ModeValues(none=8.0 * scale, selective=4.0 * scale, full=1.0 * scale),
        param_bytes=100.0,
        param_count=50.0,
        output_bytes=10.0 * scale,
        split_bw_input_s=None if split is None else split[0],
        split_bw_weight_s=None if split is None else split[1],
    )


def profile(*points: tuple[int, LayerCost]) -> ModelProfile:
    return ModelProfile(
        name="split",
        source="measured",
        seq_length=16,
        layers=(LayerRef(name="block", kind="decoder"),),
        points=tuple(ProfilePoint(micro_batch_size=b, kinds={"decoder": c}) for b, c in points),
    )


def test_split_times_follow_the_line_through_two_points() -> None:
    # I: 1.5 s at mbs 1, 2.5 s at mbs 2 -> 3.5 s at mbs 3 (same slope); W: 1.2 -> 2.0 -> 2.8
    prof = profile((1, cost(1.0, (1.5, 1.2))), (2, cost(2.0, (2.5, 2.0))))
    at3 = prof.cost("decoder", micro_batch_size=3, tp=1)
    assert at3.split_bw_input_s == pytest.approx(3.5)
    assert at3.split_bw_weight_s == pytest.approx(2.8)
    assert at3.split_costs() == pytest.approx((3.5, 2.8))


def test_split_times_scale_with_the_batch_and_the_tensor_parallel_width() -> None:
    prof = profile((2, cost(2.0, (2.4, 1.6))))
    at4 = prof.cost("decoder", micro_batch_size=4, tp=1)  # one point: x 4/2
    assert (at4.split_bw_input_s, at4.split_bw_weight_s) == pytest.approx((4.8, 3.2))
    tp2 = prof.cost("decoder", micro_batch_size=2, tp=2)  # half the work per tp rank
    assert (tp2.split_bw_input_s, tp2.split_bw_weight_s) == pytest.approx((1.2, 0.8))
    assert tp2.fw_s == pytest.approx(1.0)


def test_one_side_without_split_times_gives_none() -> None:
    prof = profile((1, cost(1.0, (1.5, 1.2))), (2, cost(2.0, None)))
    at3 = prof.cost("decoder", micro_batch_size=3, tp=1)
    assert at3.split_bw_input_s is None and at3.split_bw_weight_s is None
    assert at3.split_costs() == (at3.bw_input_s, at3.bw_weight_s)  # plain I and W then
