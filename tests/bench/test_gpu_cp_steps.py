"""bench/gpu_cp_steps.py: its dry run on CPU (the GPU run needs a CUDA device), and the
predictions it sets the measurements beside, checked against the physics they stand for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from bench.gpu_cp_steps import Shape, main, predicted_kernel, predicted_layer
from planner.catalog.hardware import GPUS, HOPPER_FLASH_ATTENTION_FRACTION

H100 = "H100-SXM-80GB"


def test_dry_run_times_every_kernel_of_the_slowest_rank(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    assert main(["--device", "cpu", "--tiny", "--repeats", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["cp"] for r in rows] == [1, 2, 4, 8]
    for row in rows:
        kernels = row["kernels_ms"]
        assert set(kernels) == ({"step0"} if row["cp"] == 1 else {"step0", "wide", "tall"})
        others = [k["fw"] for name, k in kernels.items() if name != "step0"]
        least = kernels["step0"]["fw"] + (row["cp"] - 1) * min(others, default=0.0)
        # the slowest rank runs step 0 and cp - 1 other steps, each at least the cheaper kind
        assert row["measured_fw_ms"] >= least > 0
        assert row["measured_bw_ms"] > 0


def test_a_ring_step_does_the_same_work_at_every_cp() -> None:
    """At 32K tokens a rank, the ring's steps are the same kernels at every cp: the layer's
    predicted core grows with the number of steps, cp."""
    fw = {cp: predicted_layer(cp, 32768 * cp, H100)[0] for cp in (2, 4, 8)}
    assert fw[4] / fw[2] == pytest.approx(2.0, rel=0.1)
    assert fw[8] / fw[4] == pytest.approx(2.0, rel=0.1)


def test_the_causal_step_is_priced_at_no_more_than_flash_attention_2s_share_of_the_peak() -> None:
    """Step 0 at 32K: 4 s^2 d h / 2 FLOPs forward (Q K^T and P V, the causal half), at most
    FlashAttention-2's fraction of the H100's peak (FlashAttention-3 paper, §4.1)."""
    s, heads, d = 32768, 32, 128
    fw, bw = predicted_kernel(Shape(s, s, heads, d, causal=True), H100)
    flops = 4.0 * s * s * d * heads / 2.0
    assert fw >= flops / (GPUS[H100].peak_flops * HOPPER_FLASH_ATTENTION_FRACTION)
    assert bw >= 2.5 * fw * 0.99  # the backward does 2.5x the forward's matmul work
