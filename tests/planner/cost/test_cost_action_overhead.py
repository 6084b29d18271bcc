"""The pipeline runtime's per-action overhead (ModelProfile.action_overhead_s): it reaches the
PartitionInputs from a profile, and score_partition adds it to every action's duration."""

from __future__ import annotations

import json

import pytest

from planner.catalog.models import analytic_profile
from planner.cost import build_inputs, evaluate, partition_inputs, score_partition
from planner.schedules import StageDurations, generate, simulate
from planner.specs import Candidate, ModelProfile, PlanRequest, ProfileRef, StageSpec
from planner.specs.base import ScheduleName
from planner.specs.model import ActionOverhead

OVERHEAD = ActionOverhead(f_s=3e-4, b_s=5e-4, i_s=2e-4, w_s=7e-4)


def arch_request(num_gpus: int) -> PlanRequest:
    """A small GPT planned from its architecture (the analytic catalog)."""
    return PlanRequest.model_validate(
        {
            "model": {
                "family": "gpt",
                "num_layers": 6,
                "hidden_size": 1024,
                "num_attention_heads": 16,
                "vocab_size": 32000,
            },
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": num_gpus},
            "training": {"global_batch_size": 16, "seq_length": 1024},
        }
    )


def gpt_request(overhead: ActionOverhead | None, num_gpus: int = 4) -> PlanRequest:
    arch_req = arch_request(num_gpus)
    assert arch_req.arch is not None
    profile = analytic_profile(arch_req.arch, arch_req.cluster, arch_req.training, [(1, 1, False)])
    if overhead is not None:
        profile = profile.model_copy(update={"action_overhead_s": overhead})
    return arch_req.model_copy(update={"model": ProfileRef(profile=profile)})


def layer_sums(req: PlanRequest, cand: Candidate, stages: list[StageSpec]) -> StageDurations:
    """Per-stage sums of the layers' own durations (no overhead), written out here."""
    x = partition_inputs(req, cand)
    fw, bw, w = [], [], []
    for st in stages:
        lo, hi = st.layers
        fw.append(sum(x.fw_s[lo:hi]))
        bw.append(sum(x.bw_input_s[i][0] + x.bw_weight_s[i] for i in range(lo, hi)))
        w.append(sum(x.bw_weight_s[lo:hi]))
    p2p = [x.p2p_s[st.layers[1] - 1] for st in stages]
    return StageDurations(tuple(fw), tuple(bw), tuple(w), tuple(p2p))


STAGES_2 = [StageSpec(layers=(0, 4)), StageSpec(layers=(4, 8))]
STAGES_4 = [StageSpec(layers=(0, 2)), StageSpec(layers=(2, 4))]
STAGES_4 += [StageSpec(layers=(4, 6)), StageSpec(layers=(6, 8))]


@pytest.mark.parametrize(
    ("schedule", "pp", "vpp", "stages"),
    [
        ("gpipe", 2, 1, STAGES_2),
        ("1f1b", 2, 1, STAGES_2),
        ("interleaved-1f1b", 2, 2, STAGES_4),
        ("zb-h1", 2, 1, STAGES_2),
        ("zbv", 2, 2, STAGES_4),
    ],
)
def test_score_equals_the_simulator_on_hand_added_durations(
    schedule: ScheduleName, pp: int, vpp: int, stages: list[StageSpec]
) -> None:
    req = gpt_request(OVERHEAD, num_gpus=pp)
    cand = Candidate(pp=pp, vpp=vpp, schedule=schedule, micro_batch_size=1)
    base = layer_sums(req, cand, stages)
    o = OVERHEAD
    if schedule in ("zb-h1", "zbv"):  # I takes bw - w + oI, W takes w + oW
        bw = tuple(b + o.i_s + o.w_s for b in base.bw_s)
        w = tuple(x + o.w_s for x in base.w_s)
    else:  # B takes bw + oB
        bw = tuple(b + o.b_s for b in base.bw_s)
        w = base.w_s
    fw = tuple(f + o.f_s for f in base.fw_s)
    sched = generate(schedule, pp=pp, vpp=vpp, num_microbatches=16)
    want = simulate(sched, StageDurations(fw, bw, w, base.p2p_s[:-1])).step_time_s
    sc = score_partition(partition_inputs(req, cand), stages)
    assert sc.pipeline_s == pytest.approx(want, rel=1e-12)
    without = score_partition(partition_inputs(gpt_request(None, num_gpus=pp), cand), stages)
    assert sc.pipeline_s > without.pipeline_s


def test_single_stage_adds_every_actions_overhead() -> None:
    """pp = 1: the makespan is the sum of all actions, m x (F + B), each with its overhead."""
    req = gpt_request(OVERHEAD, num_gpus=1)
    cand = Candidate(pp=1, schedule="1f1b", micro_batch_size=1)
    stages = [StageSpec(layers=(0, 8))]
    with_o = score_partition(partition_inputs(req, cand), stages)
    without = score_partition(partition_inputs(gpt_request(None, num_gpus=1), cand), stages)
    m = 16
    assert with_o.pipeline_s - without.pipeline_s == pytest.approx(
        m * (OVERHEAD.f_s + OVERHEAD.b_s), rel=1e-9
    )
    assert with_o.stage_fw_s[0] - without.stage_fw_s[0] == pytest.approx(OVERHEAD.f_s)


def test_inputs_carry_the_profiles_overhead_and_zero_otherwise() -> None:
    cand = Candidate(pp=2, schedule="zbv", vpp=2, micro_batch_size=1)
    inputs, _ = build_inputs(gpt_request(OVERHEAD, num_gpus=2), cand)
    assert inputs.action_overhead == OVERHEAD
    assert inputs.stage_overhead_s == (3e-4, 2e-4 + 7e-4, 7e-4)
    plain, _ = build_inputs(gpt_request(None, num_gpus=2), cand)
    assert plain.action_overhead.is_zero
    assert plain.overhead_durations.fw_s == (0.0,) * 4
    assert partition_inputs(arch_request(2), cand).action_overhead.is_zero
    one = build_inputs(gpt_request(OVERHEAD, num_gpus=2), Candidate(pp=2, schedule="1f1b"))[0]
    assert one.stage_overhead_s == (3e-4, 5e-4, 0.0)


def test_evaluate_busy_time_counts_the_overhead() -> None:
    cand = Candidate(pp=2, schedule="1f1b", micro_batch_size=1)
    with_o = evaluate(gpt_request(OVERHEAD, num_gpus=2), cand)
    without = evaluate(gpt_request(None, num_gpus=2), cand)
    # every rank runs m = 16 F and 16 B actions of its one stage
    for a, b in zip(with_o.ranks, without.ranks, strict=True):
        assert a.busy_s - b.busy_s == pytest.approx(16 * (OVERHEAD.f_s + OVERHEAD.b_s))


def test_profile_round_trip_and_old_profiles() -> None:
    req = gpt_request(OVERHEAD)
    prof = req.profile
    assert prof is not None
    again = ModelProfile.model_validate_json(prof.model_dump_json())
    assert again.action_overhead_s == OVERHEAD
    assert again.model_hash == prof.model_hash
    doc = json.loads(prof.model_dump_json())
    del doc["action_overhead_s"]  # a profile written before the field existed
    old = ModelProfile.model_validate(doc)
    assert old.action_overhead_s.is_zero
    zero = old.model_copy(update={"action_overhead_s": ActionOverhead()})
    assert zero.model_hash == old.model_hash  # no overhead: the hash it always had
    assert prof.model_hash != old.model_hash  # the overhead changes plans, so the hash
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ActionOverhead(f_s=-1e-6)
