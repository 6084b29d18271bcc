"""`unsupported()` on search candidates (what the search calls to narrow its space) agrees
with `render()` on plans, and the capabilities table agrees with both."""

from __future__ import annotations

import pytest
from launch_plans import LLAMA_8B, make_plan

from planner.errors import SpecError, UnsupportedPlanError
from planner.launch import CAPABILITIES, FRAMEWORKS, Deployment, render, unsupported
from planner.specs.request import Candidate


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_candidate_without_stages_checks_what_it_fixes(framework: str) -> None:
    ok = Candidate(tp=2, pp=2, dp=1, schedule="1f1b", micro_batch_size=1)
    assert unsupported(ok, framework, arch=LLAMA_8B, global_batch_size=32) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_capabilities_schedules_agree_with_unsupported(framework: str) -> None:
    caps = CAPABILITIES[framework]
    for schedule, vpp in (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1),
                          ("zbv", 2)):  # fmt: skip
        cand = Candidate(pp=4, vpp=vpp, schedule=schedule)
        reasons = unsupported(cand, framework, arch=LLAMA_8B, global_batch_size=64)  # type: ignore[arg-type]
        assert (not reasons) == (schedule in caps.schedules), (schedule, reasons)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_capabilities_zero_stages_agree_with_unsupported(framework: str) -> None:
    caps = CAPABILITIES[framework]
    for zero in (0, 1, 2, 3):
        cand = Candidate(dp=8, zero_stage=zero)
        reasons = unsupported(cand, framework, arch=LLAMA_8B, global_batch_size=64)  # type: ignore[arg-type]
        assert (not reasons) == (zero in caps.zero_stages), (zero, reasons)


def test_render_raises_with_every_reason_and_never_changes_the_plan() -> None:
    plan = make_plan(pp=2, vpp=2, schedule="interleaved-1f1b", zero=1, gbs=32, sp=False)
    with pytest.raises(UnsupportedPlanError) as info:
        render(plan, Deployment(), target="torchrun", framework="deepspeed")
    assert info.value.framework == "deepspeed"
    assert len(info.value.reasons) >= 1
    assert str(info.value).startswith("deepspeed cannot express this plan: ")


def test_unknown_framework_and_target_name_the_field() -> None:
    with pytest.raises(SpecError) as info:
        unsupported(make_plan(), "jax")  # type: ignore[arg-type]
    assert info.value.field == "framework"
    with pytest.raises(SpecError) as info:
        render(make_plan(), Deployment(), target="ray", framework="meshplan")  # type: ignore[arg-type]
    assert info.value.field == "target"
