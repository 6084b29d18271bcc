"""The search space over context and expert parallelism (planner.search.space, docs/moe.md).

Expected configurations are listed by hand from the rules: tp * cp * pp * dp = GPUs, tp
dividing the heads, seq_length % (2 cp) == 0, ep dividing num_experts, etp * ep dividing
tp * cp * dp, etp dividing tp unless constraints.etp says otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.search.space import Config, enumerate_configs
from planner.specs import PlanRequest

from .helpers import TINY, TINY_MOE

# one schedule, one ZeRO stage, one recompute mode, mbs 1: configurations differ in degrees
NARROW: dict[str, Any] = {
    "schedules": ["1f1b"],
    "zero_stages": [0],
    "recompute": ["none"],
    "micro_batch_sizes": [1],
}
LAYERS = 4  # embedding, 2 blocks, head


def request(
    model: dict[str, Any], *, gpus: int = 4, seq: int = 1004, batch: int = 4, **constraints: Any
) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": model,
            "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": gpus, "gpus_per_node": 4},
            "training": {"global_batch_size": batch, "seq_length": seq},
            "constraints": {**NARROW, **constraints},
        }
    )


def degrees(configs: list[Config]) -> list[tuple[int, int, int, int, int, int, str]]:
    return sorted((c.tp, c.cp, c.pp, c.dp, c.ep, c.etp, c.cp_comm) for c in configs)


def test_dense_degrees_by_hand() -> None:
    # seq 1004: cp = 2 splits it into 4 chunks of 251; cp = 4 would need 8 (1004 % 8 = 4).
    # (tp, cp, pp, dp) with product 4, tp in {1, 2}, cp in {1, 2}; cp = 2 once per exchange.
    want = [
        (1, 1, 1, 4),
        (1, 1, 2, 2),
        (1, 1, 4, 1),
        (1, 2, 1, 2),
        (1, 2, 2, 1),
        (2, 1, 1, 2),
        (2, 1, 2, 1),
        (2, 2, 1, 1),
    ]
    rows = []
    for tp, cp, pp, dp in want:
        comms = ("all_gather", "p2p") if cp > 1 else ("p2p",)
        rows += [(tp, cp, pp, dp, 1, 1, comm) for comm in comms]
    assert degrees(enumerate_configs(request(TINY), num_layers=LAYERS)) == sorted(rows)


def test_cp_follows_the_sequence_length() -> None:
    # seq 1024 admits cp = 4 (8 chunks of 128): (1, 4, 1, 1) joins, twice (two exchanges)
    configs = enumerate_configs(request(TINY, seq=1024), num_layers=LAYERS)
    assert {c.cp for c in configs} == {1, 2, 4}
    assert sorted(c.cp_comm for c in configs if c.cp == 4) == ["all_gather", "p2p"]
    assert all((c.tp, c.pp, c.dp) == (1, 1, 1) for c in configs if c.cp == 4)


def test_cp_leaves_no_chunk_shorter_than_a_flash_tile() -> None:
    # seq 384: 8 chunks of 48 tokens for cp = 4 (384 % 8 == 0, but 48 < 64); cp = 2 gives 96
    configs = enumerate_configs(request(TINY, seq=384), num_layers=LAYERS)
    assert {c.cp for c in configs} == {1, 2}
    assert {c.cp for c in enumerate_configs(request(TINY, seq=512), num_layers=LAYERS)} == {
        1,
        2,
        4,
    }  # 8 chunks of 64


def test_moe_expert_degrees_by_hand() -> None:
    # pp = 1, one exchange: (tp, cp, dp) in (1,1,4), (1,2,2), (2,1,2), (2,2,1), all with
    # tp * cp * dp = 4. ep in {1, 2, 4} (divides 4 experts and 4 GPUs); etp divides tp: with
    # tp = 1 only etp = 1; with tp = 2, etp in {1, 2} and etp * ep dividing 4.
    configs = enumerate_configs(request(TINY_MOE, pp=[1], cp_comm=["p2p"]), num_layers=LAYERS)
    tp1 = [(1, 1), (2, 1), (4, 1)]
    tp2 = [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]
    want = [(1, 1, 1, 4, ep, etp, "p2p") for ep, etp in tp1]
    want += [(1, 2, 1, 2, ep, etp, "p2p") for ep, etp in tp1]
    want += [(2, 1, 1, 2, ep, etp, "p2p") for ep, etp in tp2]
    want += [(2, 2, 1, 1, ep, etp, "p2p") for ep, etp in tp2]
    assert degrees(configs) == sorted(want)


def test_etp_listed_may_exceed_tp_but_must_divide_the_expert_width() -> None:
    # constraints.etp [4] lifts "etp divides tp": etp = 4 with ep = 1 on tp * cp * dp = 4
    configs = enumerate_configs(request(TINY_MOE, pp=[1], etp=[4]), num_layers=LAYERS)
    assert configs and all(c.etp == 4 and c.ep == 1 for c in configs)
    narrow = {**TINY_MOE, "moe": {**TINY_MOE["moe"], "moe_ffn_hidden_size": 98}}  # 98 % 4 = 2
    assert enumerate_configs(request(narrow, pp=[1], etp=[4]), num_layers=LAYERS) == []


def test_a_dense_model_has_no_expert_parallelism() -> None:
    configs = enumerate_configs(request(TINY, seq=1024), num_layers=LAYERS)
    assert {(c.ep, c.etp) for c in configs} == {(1, 1)}
    assert enumerate_configs(request(TINY, ep=[2]), num_layers=LAYERS) == []


@pytest.mark.parametrize("field,value", [("cp", 2), ("ep", 2), ("etp", 2)])
def test_constraints_pin_each_degree(field: str, value: int) -> None:
    req = request(TINY_MOE, seq=1024, **{field: [value]})
    configs = enumerate_configs(req, num_layers=LAYERS)
    assert configs and {getattr(c, field) for c in configs} == {value}


def test_constraints_pin_the_exchange() -> None:
    configs = enumerate_configs(request(TINY, cp_comm=["all_gather"]), num_layers=LAYERS)
    assert {c.cp_comm for c in configs if c.cp > 1} == {"all_gather"}


def test_frameworks_narrow_cp_ep_and_etp() -> None:
    wide = {**NARROW, "schedules": None, "zero_stages": None}

    def space(framework: str) -> list[Config]:
        req = request(TINY_MOE, seq=1024, framework=framework, **wide)
        return enumerate_configs(req, num_layers=LAYERS)

    megatron, titan, deepspeed, runner = (
        space(f) for f in ("megatron", "torchtitan", "deepspeed", "meshplan")
    )
    # Megatron-LM: --context-parallel-size with either --cp-comm-type, ep and etp
    assert {c.cp_comm for c in megatron if c.cp > 1} == {"p2p", "all_gather"}
    assert max(c.ep for c in megatron) == 4 and max(c.etp for c in megatron) == 2
    # torchtitan 0.3.0: torch's context_parallel (all-gather), expert_parallel_degree, no etp
    assert {c.cp_comm for c in titan if c.cp > 1} == {"all_gather"}
    assert max(c.ep for c in titan) > 1 and {c.etp for c in titan} == {1}
    # DeepSpeed: none of the three in what meshplan writes (planner/launch/frameworks)
    assert deepspeed and {(c.cp, c.ep, c.etp) for c in deepspeed} == {(1, 1, 1)}
    # the reference runner: a p2p ring, whole experts, both with tp 1 and ZeRO-0
    assert {c.cp_comm for c in runner if c.cp > 1} == {"p2p"}
    assert all(c.tp == 1 and c.zero_stage == 0 for c in runner if c.cp > 1 or c.ep > 1)
    assert {c.etp for c in runner} == {1}


def test_describe_names_the_folded_degrees() -> None:
    c = Config(2, 1, 1, 1, "1f1b", 1, 4, 0, True, ("none",), cp=2, cp_comm="all_gather", ep=4)
    text = c.describe()
    assert "tp=2 x cp=2 x pp=1 x dp=1" in text
    assert "etp=1 x ep=4 x edp=1" in text  # 2 * 2 * 1 = 4 = etp * ep * edp
    assert "all_gather" in text
    plain = Config(2, 1, 2, 1, "1f1b", 1, 4, 0, True, ("none",))
    assert plain.describe().startswith("tp=2 x pp=1 x dp=2, 1f1b")
    assert plain.family != Config(2, 1, 2, 1, "1f1b", 1, 4, 0, True, ("none",), cp=2).family


def test_a_measured_profile_keeps_cp_and_ep_at_one() -> None:
    # planner.cost.resolve_costs cannot scale a profile measured at cp = ep = etp = 1
    import random

    from .random_requests import random_request

    req = random_request(random.Random(7_001))
    configs = enumerate_configs(req, num_layers=len(req.profile.layers))  # type: ignore[union-attr]
    assert configs and {(c.cp, c.ep, c.etp) for c in configs} == {(1, 1, 1)}
    assert req.training.seq_length % 4 == 0 and req.constraints.cp is None  # cp = 2 would fit


def test_an_unfused_attention_core_keeps_cp_at_one() -> None:
    # gpt's default core is Megatron-LM 2021's unfused one; context parallelism needs a fused
    # kernel, so only cp = 1 is searched until the model says attention_kernel 'flash'
    gpt = {**TINY, "family": "gpt", "ffn_hidden_size": None}
    assert {c.cp for c in enumerate_configs(request(gpt, seq=1024), num_layers=LAYERS)} == {1}
    flash = {**gpt, "attention_kernel": "flash"}
    configs = enumerate_configs(request(flash, seq=1024), num_layers=LAYERS)
    assert {c.cp for c in configs} == {1, 2, 4}


def test_each_configuration_is_a_whole_config() -> None:
    # enumerate_configs builds them positionally (tuple.__new__): every field must be filled,
    # and the expert degrees must fold into the attention layers' tp * cp * dp.
    configs = enumerate_configs(request(TINY_MOE), num_layers=LAYERS)
    assert configs
    for c in configs:
        assert len(c) == len(Config._fields)
        assert c == Config(**c._asdict())
        assert isinstance(c.cp_comm, str) and isinstance(c.modes, tuple)
        assert (c.tp * c.cp * c.dp) % (c.etp * c.ep) == 0
