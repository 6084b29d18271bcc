"""Contention-matched profiles (`ProfileOptions.concurrency`, `profiler.contention`): the
slowdown is measured with real concurrent processes and applied to every time, nothing else."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app as cli_app
from planner.specs import ModelProfile
from profiler.contention import Contention, measure_contention, scale_profile
from profiler.layer_profiler import ProfileOptions, profile_model
from profiler.layer_source import ModelSource

TINY_GPT = "gpt:num_layers=2,hidden_size=64,num_attention_heads=4,vocab_size=128"
TIMES = ("fw_s", "bw_input_s", "bw_weight_s")


def _source() -> ModelSource:
    return ModelSource.from_spec(TINY_GPT, seq_length=16)


def test_options_reject_bad_concurrency() -> None:
    with pytest.raises(ValueError, match="concurrency=0 must be >= 1"):
        ProfileOptions(micro_batch_sizes=(1,), concurrency=0)
    with pytest.raises(ValueError, match="concurrency=2 is for device cpu, not cuda"):
        ProfileOptions(micro_batch_sizes=(1,), concurrency=2, device="cuda")
    with pytest.raises(ValueError, match="copies=0 must be >= 1"):
        measure_contention(_source(), copies=0)


def test_scale_profile_multiplies_every_time_and_nothing_else() -> None:
    prof = profile_model(_source(), ProfileOptions(micro_batch_sizes=(1, 2), repeats=2)).profile
    c = Contention(
        copies=4, cores=2, alone_s=0.01, alone_before_s=0.01, alone_after_s=0.01,
        shared_s=0.025, factor=2.5,
    )  # fmt: skip
    scaled = scale_profile(prof, c)
    assert scaled.notes["contention_copies"] == "4"
    assert float(scaled.notes["contention_factor"]) == 2.5
    assert scaled.notes["contention"].startswith("times x2.500 (measured); 4 processes on 2 cores")
    assert scaled.layers == prof.layers and scaled.arch == prof.arch
    for p, q in zip(prof.points, scaled.points, strict=True):
        assert (p.micro_batch_size, p.tp) == (q.micro_batch_size, q.tp)
        for kind, cost in p.kinds.items():
            new = q.kinds[kind]
            for name in TIMES:
                assert getattr(new, name) == pytest.approx(2.5 * getattr(cost, name), rel=1e-12)
            assert new.recompute_s.selective == pytest.approx(2.5 * cost.recompute_s.selective)
            assert new.recompute_s.full == pytest.approx(2.5 * cost.recompute_s.full)
            assert cost.split_bw_input_s is not None and cost.split_bw_weight_s is not None
            assert new.split_bw_input_s == pytest.approx(2.5 * cost.split_bw_input_s)
            assert new.split_bw_weight_s == pytest.approx(2.5 * cost.split_bw_weight_s)
            assert new.activation_bytes == cost.activation_bytes
            assert (new.param_bytes, new.output_bytes, new.fw_flops) == (
                cost.param_bytes, cost.output_bytes, cost.fw_flops,
            )  # fmt: skip
    # the per-action overhead (measured by the profiler) is the rank's CPU work too
    assert prof.action_overhead_s.f_s > 0
    for part in ("f_s", "b_s", "i_s", "w_s"):
        want = 2.5 * getattr(prof.action_overhead_s, part)
        assert getattr(scaled.action_overhead_s, part) == pytest.approx(want, rel=1e-12)
    # round-trips through the schema (a profile a plan request can carry)
    assert ModelProfile.model_validate_json(scaled.model_dump_json()) == scaled
    assert scaled.notes["contention_basis"] == "measured"
    modelled = scale_profile(prof, replace(c, model_factor=2.0), basis="model")
    assert float(modelled.notes["contention_factor"]) == 2.0
    assert modelled.notes["contention_basis"] == "model"
    cost, new = prof.points[0].kinds["decoder"], modelled.points[0].kinds["decoder"]
    assert new.fw_s == pytest.approx(2.0 * cost.fw_s)
    with pytest.raises(ValueError, match="basis='wall' is not"):
        scale_profile(prof, c, basis="wall")


def test_measure_contention_runs_the_copies_and_stops_them() -> None:
    c = measure_contention(_source(), copies=2, duration_s=0.2, rounds=3)
    assert c.copies == 2 and c.cores == len(os.sched_getaffinity(0))
    assert c.alone_before_s > 0 and c.alone_after_s > 0 and c.shared_s > 0
    assert len(c.ratios) == 3 and all(r > 0 for r in c.ratios)
    assert c.factor == statistics.median(c.ratios)
    assert c.cpu_factor > 0
    assert c.model_factor == pytest.approx(max(1.0, 2 / c.cores) * c.cpu_factor)
    assert "2 processes on" in c.note() and f"{c.ratios[0]:.3f}" in c.note()
    assert mp.active_children() == []  # the competing processes are gone
    alone = measure_contention(_source(), copies=1, duration_s=0.1)
    assert alone.factor == 1.0 and alone.ratios == () and alone.shared_s == alone.alone_s
    with pytest.raises(ValueError, match="rounds=0 must be >= 1"):
        measure_contention(_source(), copies=2, rounds=0)


@pytest.mark.slow
def test_profile_with_concurrency_scales_the_measured_times(tmp_path: Path) -> None:
    options = ProfileOptions(
        micro_batch_sizes=(1,), repeats=2, warmup=0, concurrency=2, contention_duration_s=0.3
    )
    result = profile_model(_source(), options)
    prof = result.profile
    factor = float(prof.notes["contention_factor"])
    assert prof.notes["contention_copies"] == "2" and factor > 0
    for m in result.measurements:  # the unscaled per-layer measurements
        cost = prof.points[0].kinds[m.kind]
        for name in TIMES:
            assert getattr(cost, name) == pytest.approx(factor * getattr(m.cost, name))
        assert cost.activation_bytes == m.cost.activation_bytes
    assert mp.active_children() == []
    # the CLI option reaches the profile
    out = tmp_path / "p.json"
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "1"]
    args += ["--repeats", "2", "--warmup", "0", "--device", "cpu", "--concurrency", "2"]
    result_cli = CliRunner().invoke(cli_app, [*args, "-o", str(out), "--json"])
    assert result_cli.exit_code == 0, result_cli.output
    doc = json.loads(result_cli.output)
    assert doc["profile"]["notes"]["contention_copies"] == "2"
    default = CliRunner().invoke(cli_app, [*args[:-2], "--json"])
    assert default.exit_code == 0, default.output
    assert "contention" not in json.loads(default.output)["profile"]["notes"]
