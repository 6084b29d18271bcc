"""Uniform stages give the textbook closed forms (REFERENCE.md, Narayanan et al. 2021 §2.2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.schedules import StageDurations, generate, simulate, validate

times = st.floats(min_value=0.05, max_value=5.0, allow_nan=False)


def uniform(stages: int, fw_s: float, bw_s: float, w_s: float = 0.0) -> StageDurations:
    return StageDurations((fw_s,) * stages, (bw_s,) * stages, (w_s,) * stages, (0.0,) * stages)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "1f1b"]),
    p=st.integers(1, 12),
    m=st.integers(1, 40),
    fw_s=times,
    bw_s=times,
)
def test_gpipe_and_1f1b_have_the_same_bubble(
    name: str, p: int, m: int, fw_s: float, bw_s: float
) -> None:
    schedule = generate(name, pp=p, vpp=1, num_microbatches=m)  # type: ignore[arg-type]
    validate(schedule)
    result = simulate(schedule, uniform(p, fw_s, bw_s))
    assert result.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    assert result.step_time_s == pytest.approx((m + p - 1) * (fw_s + bw_s), rel=1e-9)


@settings(max_examples=150, deadline=None)
@given(
    p=st.integers(1, 8),
    rounds=st.integers(1, 6),
    v=st.integers(2, 4),
    fw_s=times,
    bw_s=times,
)
def test_interleaved_bubble_when_m_is_a_multiple_of_p(
    p: int, rounds: int, v: int, fw_s: float, bw_s: float
) -> None:
    # Exact when m is a multiple of p (Narayanan 2021 §2.2.2 assumes it); fw_s/bw_s are per chunk.
    m = p * rounds
    schedule = generate("interleaved-1f1b", pp=p, vpp=v, num_microbatches=m)
    validate(schedule)
    result = simulate(schedule, uniform(p * v, fw_s, bw_s))
    assert result.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(p=st.integers(1, 12), m=st.integers(1, 40))
def test_inflight_gpipe_m_and_1f1b_min_p_minus_s_m(p: int, m: int) -> None:
    durations = uniform(p, 1.0, 2.0)
    gpipe = simulate(generate("gpipe", pp=p, vpp=1, num_microbatches=m), durations)
    assert gpipe.peak_inflight == (m,) * p
    one_f_one_b = simulate(generate("1f1b", pp=p, vpp=1, num_microbatches=m), durations)
    assert one_f_one_b.peak_inflight == tuple(min(p - s, m) for s in range(p))


@settings(max_examples=100, deadline=None)
@given(p=st.integers(2, 8), m=st.integers(1, 30), f=times, b=times)
def test_zb_h1_bubble_no_worse_than_1f1b(p: int, m: int, f: float, b: float) -> None:
    # Qi et al. 2024 Table 2: ZB-H1 bubble (p-1)(T_F + T_B - T_W) <= 1F1B's (p-1)(T_F + T_B).
    w = b / 2
    try:
        zb = generate("zb-h1", pp=p, vpp=1, num_microbatches=m)
    except ValueError:
        return  # torch's rounds rule (m % max(1, m // p)) rejects this m
    validate(zb)
    one = simulate(generate("1f1b", pp=p, vpp=1, num_microbatches=m), uniform(p, f, b, w))
    split = simulate(zb, uniform(p, f, b, w))
    assert split.step_time_s <= one.step_time_s + 1e-9
    # Held until W: torch's ZB-H1 defers `rank` weight-grads, so every stage peaks at
    # min(p, m) -- the 1F1B maximum (first stage), as Qi et al. 2024 state for ZB-H1.
    assert split.peak_inflight == (min(p, m),) * p
    assert max(split.peak_inflight) == max(one.peak_inflight)


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_zbv_is_bubble_free_in_the_steady_state_when_f_i_w_are_equal(p: int) -> None:
    # Qi et al. 2024 §6: ZB-V's bubble vanishes as m grows when T_F = T_B_input = T_W.
    bubbles = []
    for m in (2 * p, 8 * p, 32 * p):
        schedule = generate("zbv", pp=p, vpp=2, num_microbatches=m)
        validate(schedule)
        bubbles.append(simulate(schedule, uniform(2 * p, 1.0, 2.0, 1.0)).bubble_fraction)
    assert bubbles[0] > bubbles[1] > bubbles[2]
    assert bubbles[2] < 0.05


@settings(max_examples=150, deadline=None)
@given(p=st.integers(2, 8), extra=st.integers(0, 24), f=times, i=times, w_frac=st.floats(0.05, 1.0))
def test_zb_h1_step_time_matches_qi_et_al(
    p: int, extra: int, f: float, i: float, w_frac: float
) -> None:
    # Qi et al. 2024 Table 2: ZB-H1 bubble (p-1)(T_F + T_B - T_W), T_B the input-grad part.
    # Exact in the simulator when m >= p and T_W <= min(T_F, T_B) (the paper's setting).
    m = p + extra
    w = w_frac * min(f, i)
    try:
        schedule = generate("zb-h1", pp=p, vpp=1, num_microbatches=m)
    except ValueError:
        return  # torch's rounds rule (m % max(1, m // p)) rejects this m
    result = simulate(schedule, uniform(p, f, i + w, w))
    expected = m * (f + i + w) + (p - 1) * (f + i - w)
    assert result.step_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"])
def test_peak_inflight_of_matches_the_generated_schedule(name: str) -> None:
    """The search's fast in-flight counts (no schedule built) against peak_inflight of the
    generated schedule, over every valid (pp, vpp, m) of a grid."""
    from planner.errors import SpecError
    from planner.schedules import peak_inflight, peak_inflight_of

    checked = 0
    for pp in range(1, 7):
        for vpp in range(1, 4):
            for m in range(1, 17):
                try:
                    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
                except SpecError:
                    with pytest.raises(SpecError):
                        peak_inflight_of(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
                    continue
                fast = peak_inflight_of(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
                assert fast == peak_inflight(sched), (pp, vpp, m)
                checked += 1
    assert checked >= 90


@pytest.mark.parametrize(("name", "vpp"), [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("zbv", 2)])
def test_peak_inflight_closed_forms_hold_on_a_wide_grid(name: str, vpp: int) -> None:
    """peak_inflight_of answers these four from closed forms: checked against the generated
    orders well beyond the small grid above."""
    from planner.errors import SpecError
    from planner.schedules import peak_inflight, peak_inflight_of

    checked = 0
    for pp in range(1, 17):
        for m in (*range(1, 33), 40, 48):
            try:
                sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
            except SpecError:  # zb-h1's round rule
                continue
            checked += 1
            closed = peak_inflight_of(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
            assert closed == peak_inflight(sched), (pp, m)
    assert checked >= 300


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-h1"])
def test_interleaved_peaks_counted_without_an_order_match_it(name: str) -> None:
    """peak_inflight_of counts the interleaved orders' in-flight micro-batches as it
    generates their op sequence: checked against the generated orders on a wide grid."""
    from planner.errors import SpecError
    from planner.schedules import peak_inflight, peak_inflight_of

    checked = 0
    for pp in range(1, 11):
        for vpp in range(1 if name == "zb-h1" else 2, 6):
            for m in (*range(1, 25), 32, 40, 48, 64):
                try:
                    sched = generate(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
                except SpecError:
                    continue
                fast = peak_inflight_of(name, pp=pp, vpp=vpp, num_microbatches=m)  # type: ignore[arg-type]
                assert fast == peak_inflight(sched), (pp, vpp, m)
                checked += 1
    assert checked >= 300
