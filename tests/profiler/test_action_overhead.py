"""The per-action overhead of torch's PipelineStage (profiler.action_overhead), measured on
this CPU, and carried by a profile into the plan's prediction."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from planner.cost import evaluate
from planner.specs import Candidate, ModelProfile, PlanRequest, ProfileRef
from profiler.action_overhead import POSITIONS, measure_action_overhead, note
from profiler.layer_profiler import ProfileOptions, profile_model
from profiler.layer_source import ModelSource

TINY_GPT = "gpt:num_layers=2,hidden_size=64,num_attention_heads=4,vocab_size=128"


def test_the_stage_costs_more_than_the_module_on_cpu() -> None:
    torch.set_num_threads(1)
    mean, per = measure_action_overhead(rounds=10, warmup=2)
    assert not dist.is_initialized()  # the process group of one rank is gone again
    assert [p.position for p in per] == list(POSITIONS)
    # every entry point does work of its own around the module: positive, and far below a
    # millisecond on a near-zero-cost module
    for part in ("f_s", "b_s", "i_s", "w_s"):
        value = getattr(mean, part)
        assert 0 < value < 2e-3, (part, value)
    for p in per:
        assert p.stage_s["F"] > p.direct_s["F"]
        assert p.stage_s["B"] > p.direct_s["B"]
    # the mean is the mean of the positions' overheads
    assert mean.f_s == pytest.approx(sum(p.overhead.f_s for p in per) / 3)
    assert note(per).count("F ") == 3


def test_profile_carries_the_overhead_into_the_prediction() -> None:
    source = ModelSource.from_spec(TINY_GPT, seq_length=16)
    prof = profile_model(source, ProfileOptions(micro_batch_sizes=(1,), repeats=1)).profile
    o = prof.action_overhead_s
    assert o.f_s > 0 and o.b_s > 0 and o.i_s > 0 and o.w_s > 0
    assert "first: F" in prof.notes["action_overhead"]
    again = ModelProfile.model_validate_json(prof.model_dump_json())
    assert again.action_overhead_s == o
    off = profile_model(
        source, ProfileOptions(micro_batch_sizes=(1,), repeats=1, action_overhead=False)
    ).profile
    assert off.action_overhead_s.is_zero and "action_overhead" not in off.notes

    def predict(p: ModelProfile) -> float:
        req = PlanRequest.model_validate(
            {
                "model": ProfileRef(profile=p).model_dump(),
                "cluster": {"gpu": "CPU", "num_gpus": 2, "gpus_per_node": 2},
                "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
                "constraints": {"memory_reserve_gib": 0.0},
            }
        )
        cand = Candidate(pp=2, schedule="1f1b", micro_batch_size=1)
        return sum(r.busy_s for r in evaluate(req, cand).ranks)

    # same layer costs, with and without the overhead: 8 F and 8 B actions per rank
    stripped = prof.model_copy(update={"action_overhead_s": off.action_overhead_s})
    assert predict(prof) - predict(stripped) == pytest.approx(2 * 8 * (o.f_s + o.b_s))
