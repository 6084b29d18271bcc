"""Spec limits and GPU names: bounds quoted in messages, text rules, catalog names."""

from __future__ import annotations

import pydantic
import pytest

from planner.catalog.hardware import GPUS
from planner.specs import ClusterSpec, TrainingSpec
from planner.specs.gpu_names import canonical_gpu, gpu_candidates
from planner.specs.limits import BOUNDS, check_text


@pytest.mark.parametrize("name", ["A100", "A100-80GB", "a100 sxm 80gb", "A100_SXM_80GB", " a100 "])
def test_a100_spellings(name: str) -> None:
    assert canonical_gpu(name) == "A100-SXM-80GB"
    assert ClusterSpec(gpu=name, num_gpus=8).gpu == "A100-SXM-80GB"


def test_every_catalog_name_is_its_own_canonical_name() -> None:
    for name in GPUS:
        assert canonical_gpu(name) == name
        assert canonical_gpu(name.lower().replace("-", " ")) == name


def test_ambiguous_and_unknown_names() -> None:
    assert len(gpu_candidates("80GB")) >= 2
    with pytest.raises(ValueError, match=r"ambiguous.*A100-SXM-80GB.*H100-SXM-80GB"):
        canonical_gpu("80GB")
    with pytest.raises(ValueError, match="unknown GPU 'TPU'"):
        canonical_gpu("TPU")
    with pytest.raises(ValueError, match="unknown"):
        canonical_gpu("  ")


def test_text_rules() -> None:
    assert check_text("plain ünïcode 名前") == "plain ünïcode 名前"
    with pytest.raises(ValueError, match=r"NUL.*index 2"):
        check_text("ab\x00c")
    with pytest.raises(ValueError, match=r"U\+DC00 at index 1"):
        check_text("a\udc00")


def test_bounds_are_quoted() -> None:
    with pytest.raises(pydantic.ValidationError, match=str(int(BOUNDS.memory_gib))):
        ClusterSpec(gpu="H100", num_gpus=8, memory_gib=1e308)
    with pytest.raises(pydantic.ValidationError, match=str(BOUNDS.seq_length)):
        TrainingSpec(global_batch_size=8, seq_length=BOUNDS.seq_length + 1)
    # at the bound itself: accepted
    assert ClusterSpec(gpu="H100", num_gpus=8, memory_gib=BOUNDS.memory_gib).memory_gib == 16384
