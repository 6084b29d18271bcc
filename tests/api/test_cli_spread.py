"""`meshplan profile`'s reliability warning (api.cli.spread) on profiles with known spreads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import meshplan
from svc_factories import profile_doc, tiny_request

from api.cli.spread import SpreadLimits, noisy_timings, spread_warning
from planner.specs import ModelProfile

BASE = profile_doc(tiny_request())  # analytic: 3 points x (embedding, decoder, head)


def with_spreads(spreads: dict[tuple[int, str], dict[str, float]]) -> ModelProfile:
    """BASE with `spreads[(point index, kind)]` as those costs' measured spreads."""
    doc: dict[str, Any] = copy.deepcopy(BASE)
    for (index, kind), spread in spreads.items():
        doc["points"][index]["kinds"][kind]["spread"] = spread
    return ModelProfile.model_validate(doc)


def test_no_spread_recorded_no_warning() -> None:
    assert spread_warning(ModelProfile.model_validate(BASE)) is None


def test_spreads_under_the_limit_pass() -> None:
    quiet = with_spreads({(0, "decoder"): {"fw_s": 0.05, "bw_input_s": 0.25}})
    assert spread_warning(quiet) is None


def test_a_900_percent_spread_is_reported_with_where_it_was() -> None:
    point = BASE["points"][1]
    noisy = with_spreads(
        {
            (0, "decoder"): {"fw_s": 0.02, "bw_input_s": 0.4},
            (1, "decoder"): {"fw_s": 9.0, "bw_input_s": 0.01},
        }
    )
    found = noisy_timings(noisy)
    assert [(t.kind, t.timing, t.spread) for t in found] == [
        ("decoder", "fw_s", 9.0),
        ("decoder", "bw_input_s", 0.4),
    ]
    warning = spread_warning(noisy)
    assert warning is not None
    assert warning.startswith("2 of 4 timings spread more than 25% (worst: decoder.fw_s at ")
    assert f"tp={point['tp']} mbs={point['micro_batch_size']}, spread 900%" in warning
    assert "unreliable" in warning


def test_short_timings_are_not_judged() -> None:
    # The embedding's recompute is 0 s: no share of its layer's time, so its spread is moot.
    assert BASE["points"][0]["kinds"]["embedding"]["recompute_s"]["selective"] == 0.0
    noisy = with_spreads({(0, "embedding"): {"recompute_selective_s": 9.0}})
    assert noisy_timings(noisy) == []


@pytest.mark.parametrize(("limit", "warned"), [(0.5, False), (0.1, True)])
def test_the_limit_is_a_knob(limit: float, warned: bool) -> None:
    profile = with_spreads({(2, "head"): {"fw_s": 0.3}})
    assert (spread_warning(profile, SpreadLimits(max_spread=limit)) is not None) is warned


@pytest.mark.slow
def test_profile_command_reports_the_check(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "p.json"
    model = "gpt:num_layers=2,hidden_size=64,num_attention_heads=4,vocab_size=128"
    args = ["profile", "--model", model, "--seq-length", "16", "--micro-batch-sizes", "1"]
    proc = meshplan(*args, "--repeats", "3", "--warmup", "0", "--device", "cpu", "-o", str(out),
                    "--json", timeout_s=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    profile = ModelProfile.model_validate_json(out.read_text())
    expected = spread_warning(profile)
    assert doc["warnings"] == ([expected] if expected else [])
