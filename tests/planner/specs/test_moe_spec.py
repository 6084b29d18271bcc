"""The MoE, latent-attention, head-size and sliding-window options of ModelArch."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from planner.catalog.hardware import lookup_gpu
from planner.catalog.models import analytic_costs, layer_refs
from planner.specs import ClusterSpec, ModelArch, PlanRequest, TrainingSpec
from planner.specs.model import MlaSpec, MoeSpec, SlidingWindow

LLAMA: dict[str, Any] = {
    "family": "llama",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "ffn_hidden_size": 512,
    "vocab_size": 1000,
}
MOE: dict[str, Any] = {"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": 128}


def _message(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    return "; ".join(str(e["msg"]) for e in exc.value.errors())


def test_a_model_without_the_new_options_dumps_and_hashes_as_before() -> None:
    arch = ModelArch(**LLAMA)
    # the JSON layout of ModelArch before the options existed, written out by hand
    old = (
        '{"family":"llama","name":"","num_layers":4,"hidden_size":256,'
        '"num_attention_heads":8,"num_kv_heads":null,"ffn_hidden_size":512,'
        '"vocab_size":1000,"tied_embeddings":null}'
    )
    assert arch.model_dump_json() == old
    request = PlanRequest(
        model=arch,
        cluster=ClusterSpec(gpu="A100-SXM-80GB", num_gpus=8),
        training=TrainingSpec(global_batch_size=8, seq_length=512),
    )
    assert request.model_hash == hashlib.sha256(old.encode()).hexdigest()[:16]
    assert "moe" not in request.model_dump(mode="json")["model"]


def test_an_moe_model_round_trips_and_counts_its_moe_layers() -> None:
    arch = ModelArch(
        **LLAMA,
        head_dim=64,
        moe={**MOE, "first_dense_layers": 1, "moe_layer_frequency": 2},
        sliding_window={"window": 128, "full_every": 2},
    )
    assert ModelArch.model_validate_json(arch.model_dump_json()) == arch
    assert [arch.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert arch.num_moe_layers == 2
    assert arch.head_size == 64 and ModelArch(**LLAMA).head_size == 32
    sw = arch.sliding_window
    assert sw is not None and [sw.is_sliding(i) for i in range(4)] == [True, False, True, False]
    assert SlidingWindow(window=4).is_sliding(3)
    assert not arch.is_plain and ModelArch(**LLAMA).is_plain
    with pytest.raises(ValidationError):
        arch.moe.num_experts = 4  # type: ignore[union-attr, misc]


@pytest.mark.parametrize(
    ("moe", "needle"),
    [
        ({**MOE, "experts_per_token": 9}, "experts_per_token=9 exceeds num_experts=8"),
        ({**MOE, "num_experts": 0}, "greater than 0"),
        ({**MOE, "capacity_factor": 0}, "greater than 0"),
        ({**MOE, "capacity_factor": 65}, "less than or equal to 64"),
        ({**MOE, "router": "relu"}, "'softmax' or 'sigmoid'"),
        ({**MOE, "moe_layer_frequency": 0}, "greater than 0"),
    ],
)
def test_invalid_moe_options_name_the_numbers(moe: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as exc:
        MoeSpec(**moe)
    assert needle in _message(exc)


def test_model_level_checks_print_the_numbers() -> None:
    with pytest.raises(ValidationError) as exc:
        ModelArch(**LLAMA, moe={**MOE, "first_dense_layers": 4})
    assert "first_dense_layers=4 leaves no MoE layer among num_layers=4" in _message(exc)
    with pytest.raises(ValidationError) as exc:
        ModelArch(**{**LLAMA, "hidden_size": 100})
    assert "num_attention_heads=8 must divide hidden_size=100 (remainder 4)" in _message(exc)
    # a head size of its own lifts the divisibility (Qwen3, GPT-OSS: 2880 / 64 heads of 64)
    assert ModelArch(**{**LLAMA, "hidden_size": 100}, head_dim=64).head_size == 64
    with pytest.raises(ValidationError) as exc:
        ModelArch(**LLAMA, head_dim=33)
    assert "head_dim=33 must be even" in _message(exc)
    mla = MlaSpec(kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
    with pytest.raises(ValidationError) as exc:
        ModelArch(**LLAMA, mla=mla, head_dim=64)
    assert "head_dim=64 and num_kv_heads=None must be left unset" in _message(exc)
    with pytest.raises(ValidationError) as exc:
        SlidingWindow(window=16, full_every=1)
    assert "greater than or equal to 2" in _message(exc)


def test_the_catalog_costs_an_moe_layer_as_its_own_kind() -> None:
    arch = ModelArch(**LLAMA, moe=MOE)
    gpu = lookup_gpu("A100-SXM-80GB")
    assert gpu is not None
    costs = analytic_costs(
        arch,
        gpu=gpu,
        dtype="bf16",
        seq_length=512,
        micro_batch_size=1,
        tp=1,
        sequence_parallel=False,
    )
    kinds = {ref.kind for ref in layer_refs(arch)}
    assert kinds <= costs.keys()
    assert "decoder_moe" in kinds
