"""A measured profile's split-backward times (LayerCost.split_bw_input_s / split_bw_weight_s,
measured through torch's stage_backward_input / stage_backward_weight) price the I and W
actions of zb-h1 and zbv, and nothing else."""

from __future__ import annotations

import pytest

from planner.cost import evaluate
from planner.cost.inputs import partition_inputs
from planner.specs import Candidate, ModelProfile, PlanRequest, ProfileRef
from profiler.layer_profiler import ProfileOptions, profile_model
from profiler.layer_source import ModelSource

TINY_GPT = "gpt:num_layers=4,hidden_size=64,num_attention_heads=4,vocab_size=128"


@pytest.fixture(scope="module")
def measured() -> ModelProfile:
    source = ModelSource.from_spec(TINY_GPT, seq_length=16)
    options = ProfileOptions(micro_batch_sizes=(1,), repeats=2, action_overhead=False)
    return profile_model(source, options).profile


def _request(profile: ModelProfile) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": ProfileRef(profile=profile).model_dump(),
            "cluster": {"gpu": "CPU", "num_gpus": 2, "gpus_per_node": 2},
            "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
            "constraints": {"memory_reserve_gib": 0.0},
        }
    )


def _with_split(profile: ModelProfile, split_i: float, split_w: float) -> ModelProfile:
    point = profile.points[0]
    dec = point.kinds["decoder"].model_copy(
        update={"split_bw_input_s": split_i, "split_bw_weight_s": split_w}
    )
    kinds = {**point.kinds, "decoder": dec}
    return profile.model_copy(update={"points": (point.model_copy(update={"kinds": kinds}),)})


def test_split_schedules_use_the_split_times(measured: ModelProfile) -> None:
    dec = measured.points[0].kinds["decoder"]
    assert dec.split_bw_input_s is not None and dec.split_bw_weight_s is not None
    prof = _with_split(measured, 0.25, 0.125)  # seconds, far from anything measured
    req = _request(prof)
    zbv = Candidate(pp=2, vpp=2, schedule="zbv", micro_batch_size=1)
    inputs = partition_inputs(req, zbv)
    decoders = [i for i, layer in enumerate(prof.layers) if layer.kind == "decoder"]
    assert decoders
    for i in decoders:
        assert inputs.bw_input_s[i][0] == 0.25  # tp = 1: no collective added
        assert inputs.bw_weight_s[i] == 0.125
        assert inputs.bw_input_s[i][2] == 0.25 + dec.recompute_s.full
    # a schedule with full backwards (B = I + W) keeps the plain I and W
    f1b = partition_inputs(req, Candidate(pp=2, schedule="1f1b", micro_batch_size=1))
    for i in decoders:
        assert f1b.bw_input_s[i][0] == dec.bw_input_s
        assert f1b.bw_weight_s[i] == dec.bw_weight_s


def test_split_times_change_the_zbv_prediction_only(measured: ModelProfile) -> None:
    dec = measured.points[0].kinds["decoder"]
    same = _with_split(measured, dec.bw_input_s, dec.bw_weight_s)
    dearer = _with_split(measured, 2 * dec.bw_input_s, 2 * dec.bw_weight_s)
    zbv = Candidate(pp=2, vpp=2, schedule="zbv", micro_batch_size=1)
    f1b = Candidate(pp=2, schedule="1f1b", micro_batch_size=1)

    def busy(p: ModelProfile, c: Candidate) -> float:
        return sum(r.busy_s for r in evaluate(_request(p), c).ranks)

    # each decoder's I + W doubles, on every one of the 2 x 4 micro-batch backwards
    extra = 8 * 4 * (dec.bw_input_s + dec.bw_weight_s)
    assert busy(dearer, zbv) - busy(same, zbv) == pytest.approx(extra, rel=1e-9)
    assert busy(dearer, f1b) == busy(same, f1b)
