"""check_candidate: contextual validation (errors name the field) and balanced stages."""

from __future__ import annotations

import pytest

from planner.cost import balanced_bounds, check_candidate, resolve_costs
from planner.errors import SpecError
from planner.specs import Candidate, PlanRequest, ProfileRef, StageSpec


def request(**overrides: object) -> PlanRequest:
    doc: dict[str, object] = {
        "model": {
            "family": "llama",
            "num_layers": 8,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "num_kv_heads": 4,
            "ffn_hidden_size": 2816,
            "vocab_size": 32000,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_length": 1024},
    }
    doc.update(overrides)
    return PlanRequest.model_validate(doc)


def fails(req: PlanRequest, cand: Candidate, field: str, value: object) -> SpecError:
    with pytest.raises(SpecError) as info:
        check_candidate(req, cand)
    assert info.value.field == field
    assert info.value.value == value
    assert field in str(info.value)
    return info.value


def test_world_size_must_match() -> None:
    err = fails(request(), Candidate(tp=2, pp=2, dp=2), "candidate.tp*pp*dp", 8)
    assert "16" in str(err)


def test_tp_must_divide_kv_heads() -> None:
    # 8 divides 16 heads but not 4 kv heads
    err = fails(request(), Candidate(tp=8, pp=1, dp=2), "candidate.tp", 8)
    assert "num_kv_heads=4" in str(err)


def test_tp_within_a_node_unless_allowed() -> None:
    req = request(
        model={
            "family": "gpt",
            "num_layers": 8,
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "vocab_size": 32000,
        }
    )
    fails(req, Candidate(tp=16, pp=1, dp=1), "candidate.tp", 16)
    allowed = req.model_copy(
        update={"constraints": req.constraints.model_copy(update={"tp_across_nodes": True})}
    )
    assert check_candidate(allowed, Candidate(tp=16, pp=1, dp=1)).tp == 16


def test_stages_cannot_exceed_layers() -> None:
    # 8 decoders + embedding + head = 10 layers; pp=4 x vpp=3 = 12 stages
    fails(
        request(training={"global_batch_size": 64, "seq_length": 1024}),
        Candidate(tp=1, pp=4, dp=4, vpp=3, schedule="interleaved-1f1b"),
        "candidate.vpp",
        3,
    )
    fails(request(), Candidate(tp=1, pp=16, dp=1), "candidate.pp", 16)


def test_global_batch_divisible_by_dp_times_mbs() -> None:
    err = fails(
        request(), Candidate(tp=1, pp=2, dp=8, micro_batch_size=3), "training.global_batch_size", 64
    )
    assert "24" in str(err)


def test_interleaved_round_rule() -> None:
    # torch's Interleaved1F1B: m % max(1, m // pp) == 0.
    # m = 28 / 2 = 14 with pp = 4: 14 % 3 = 2 -> error; m = 24 / 2 = 12: 12 % 3 = 0 -> fine
    req = request(training={"global_batch_size": 28, "seq_length": 1024})
    fails(
        req,
        Candidate(tp=2, pp=4, dp=2, vpp=2, schedule="interleaved-1f1b"),
        "candidate.micro_batch_size",
        1,
    )
    ok = request(training={"global_batch_size": 24, "seq_length": 1024})
    assert check_candidate(ok, Candidate(tp=2, pp=4, dp=2, vpp=2, schedule="interleaved-1f1b"))


def test_stages_must_cover_every_layer() -> None:
    stages = (StageSpec(layers=(0, 4)), StageSpec(layers=(4, 9)))
    fails(request(), Candidate(tp=1, pp=2, dp=8, stages=stages), "candidate.stages", 9)


def test_profile_id_must_be_resolved_by_the_service() -> None:
    req = request(model={"profile_id": "abc123"})
    assert isinstance(req.model, ProfileRef)
    with pytest.raises(SpecError) as info:
        resolve_costs(req)
    assert info.value.field == "model.profile_id"
    assert info.value.value == "abc123"
    assert "service" in str(info.value)


@pytest.mark.parametrize(
    ("layers", "stages", "expected"),
    [
        (10, 4, ((0, 3), (3, 5), (5, 7), (7, 10))),
        (10, 1, ((0, 10),)),
        (11, 4, ((0, 3), (3, 6), (6, 8), (8, 11))),  # 9 decoders: the extra one on stage 1
        (5, 4, ((0, 2), (2, 3), (3, 4), (4, 5))),  # 3 decoders < 4 stages: whole list split
    ],
)
def test_balanced_bounds(layers: int, stages: int, expected: tuple[tuple[int, int], ...]) -> None:
    assert balanced_bounds(layers, stages) == expected


def test_filled_stages_recompute_every_decoder_never_embedding_or_head() -> None:
    c = check_candidate(request(), Candidate(tp=1, pp=2, dp=8, recompute="full"))
    assert c.stages is not None
    modes = [m for s in c.stages for m in (s.recompute or ())]
    assert modes == ["none"] + ["full"] * 8 + ["none"]
    assert [s.layers for s in c.stages] == [(0, 5), (5, 10)]


def test_given_stages_kept_and_missing_modes_filled() -> None:
    stages = (
        StageSpec(layers=(0, 3), recompute=("none", "selective", "full")),
        StageSpec(layers=(3, 10)),
    )
    c = check_candidate(
        request(), Candidate(tp=1, pp=2, dp=8, recompute="selective", stages=stages)
    )
    assert c.stages is not None
    assert c.stages[0] == stages[0]
    assert c.stages[1].recompute == ("selective",) * 6 + ("none",)
