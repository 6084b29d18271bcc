"""constraints.framework narrows the configurations to what that framework's unsupported() accepts.

One source of truth: the capability table and each framework's `unsupported()`
(planner.launch); every configuration the search space holds for a framework is one that
`unsupported()` accepts (stage split still open).
"""

from __future__ import annotations

import pytest

from planner.launch import CAPABILITIES, unsupported
from planner.search.space import Config, enumerate_configs
from planner.specs import PlanRequest

from .helpers import LLAMA
from .helpers import framework_request as request


def reasons(req: PlanRequest, c: Config, framework: str) -> list[str]:
    """What the launcher's unsupported() finds against c's candidate under `framework`."""
    return unsupported(
        c.candidate(),
        framework,  # type: ignore[arg-type]
        arch=req.arch,
        global_batch_size=req.training.global_batch_size,
        seq_length=req.training.seq_length,
    )


def accepted(req: PlanRequest, c: Config, framework: str) -> bool:
    return not reasons(req, c, framework)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_every_configuration_is_accepted_by_the_frameworks_unsupported(framework: str) -> None:
    req = request(framework)
    configs = enumerate_configs(req, num_layers=18)
    assert configs
    assert all(accepted(req, c, framework) for c in configs)
    caps = CAPABILITIES[framework]
    assert {c.schedule for c in configs if c.pp > 1} <= caps.schedules
    assert max(c.vpp for c in configs) <= caps.max_vpp


def test_deepspeed_never_gets_sequence_parallel_and_refuses_it_when_asked() -> None:
    configs = enumerate_configs(request("deepspeed"), num_layers=18)
    assert any(c.tp > 1 for c in configs)
    assert not any(c.sequence_parallel for c in configs)
    asked = enumerate_configs(request("deepspeed", sequence_parallel=True), num_layers=18)
    assert asked and all(c.tp == 1 for c in asked)


def test_megatron_interleaving_keeps_only_m_divisible_by_pp() -> None:
    # global batch 24 over dp 2 and micro-batch 4 gives m = 3: interleaving with pp = 2 or 4
    # is refused by Megatron; without a framework the space holds such configurations
    free = enumerate_configs(request(None, schedules=["interleaved-1f1b"]), num_layers=18)
    assert any(c.vpp > 1 and c.num_microbatches % c.pp for c in free)
    megatron = enumerate_configs(request("megatron"), num_layers=18)
    interleaved = [c for c in megatron if c.vpp > 1]
    assert interleaved and all(c.num_microbatches % c.pp == 0 for c in interleaved)


def test_torchtitan_replicates_with_tp_and_pp_but_never_zero1() -> None:
    configs = enumerate_configs(request("torchtitan"), num_layers=18)
    assert any(c.zero_stage == 0 and c.dp > 1 and c.tp > 1 and c.pp > 1 for c in configs)
    assert not any(c.zero_stage in (1, 2) for c in configs)


def test_meshplan_configurations_keep_torchs_schedule_rules() -> None:
    """torch's Schedule1F1B refuses fewer micro-batches than stages (the runner's failure seen
    in tests/profiler/test_runner_property.py); framework meshplan never gets such a plan, and
    without a framework the space still holds it (other trainers run it)."""
    open_req = request(None, pp=[4], schedules=["1f1b"])
    short = [c for c in enumerate_configs(open_req, num_layers=18) if c.num_microbatches < c.pp]
    assert short, "the request must admit m < pp for the test to mean anything"
    req = request("meshplan", pp=[4], schedules=["1f1b"])
    configs = enumerate_configs(req, num_layers=18)
    assert configs
    assert all(c.num_microbatches >= c.pp for c in configs)


TINY_MOE = {
    **LLAMA,
    "name": "tiny-moe",
    "num_layers": 4,
    "moe": {"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 1024},
}


def _request(model: dict[str, object], framework: str | None) -> PlanRequest:
    return request(framework, model, uniform_recompute=True)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed", "meshplan"])
@pytest.mark.parametrize("model", [LLAMA, TINY_MOE], ids=["llama", "moe"])
def test_the_space_checks_a_configuration_as_the_launchers_unsupported_does(
    framework: str, model: dict[str, object]
) -> None:
    """The enumeration's framework check (planner.search.space.config_unsupported builds the
    LaunchView without a Candidate) gives the reasons unsupported() gives for the candidate,
    on every configuration of the unrestricted space (uniform recompute: one mode each),
    those the framework refuses included."""
    from planner.search.space import config_unsupported

    base, fw = _request(model, None), _request(model, framework)
    assert fw.arch is not None
    configs = enumerate_configs(base, num_layers=fw.arch.num_layers + 2)
    assert any(c.cp > 1 for c in configs)
    refused = 0
    for c in configs:
        want = reasons(fw, c, framework)
        assert config_unsupported(fw, c) == want, c.describe()
        refused += bool(want)
    assert 0 < refused < len(configs)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed", "meshplan"])
def test_one_checker_gives_each_configuration_its_own_reasons(framework: str) -> None:
    """The enumeration's checker (space.framework_checker) keeps a verdict for the
    configurations that differ in their recompute modes alone: over the whole unrestricted
    space (uniform recompute: one configuration per mode), one checker still gives every
    configuration the reasons unsupported() gives its candidate (a framework whose check read
    the recompute mode of an open split would fail here)."""
    from planner.search.space import framework_checker

    base, fw = _request(LLAMA, None), _request(LLAMA, framework)
    assert fw.arch is not None
    configs = enumerate_configs(base, num_layers=fw.arch.num_layers + 2)
    assert len({c.modes for c in configs}) > 1
    check = framework_checker(fw)
    for c in configs:
        want = reasons(fw, c, framework)
        assert check(c) == want, c.describe()
