"""docs/requests.md states what the specs accept: its field tables are the generated ones, and
every JSON example in it is accepted by the spec it documents and predicts as stated."""

from __future__ import annotations

import json
import re

import pytest

from planner.cost import check_candidate, evaluate
from planner.specs import Candidate, ModelArch, PlanRequest
from tests import docs_reference


def examples() -> list[dict[str, object]]:
    text = docs_reference.DOC.read_text()
    return [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", text, re.S | re.M)]


def test_field_tables_are_current() -> None:
    assert docs_reference.current() == docs_reference.render(), (
        "docs/requests.md is stale: python -m tests.docs_reference --write"
    )


def test_field_tables_list_every_top_level_field() -> None:
    text = docs_reference.current()
    for name in PlanRequest.model_fields:
        assert f"| `{name}` |" in text
    for name in Candidate.model_fields:
        assert f"| `{name}` |" in text


def test_model_example_is_a_valid_llama() -> None:
    arch = ModelArch.model_validate(examples()[0])
    assert arch.family == "llama" and arch.num_kv_heads == 8


@pytest.mark.parametrize(
    ("index", "request_doc"),
    [
        (
            1,
            {
                "model": {
                    "family": "gpt",
                    "name": "gpt3-175b",
                    "num_layers": 96,
                    "hidden_size": 12288,
                    "num_attention_heads": 96,
                    "vocab_size": 51200,
                },
                "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 1024, "gpus_per_node": 8},
                "training": {"global_batch_size": 1536, "seq_length": 2048},
            },
        ),
        (
            2,
            {
                "model": {
                    "family": "gpt",
                    "name": "tiny",
                    "num_layers": 4,
                    "hidden_size": 256,
                    "num_attention_heads": 4,
                    "vocab_size": 1024,
                },
                "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2},
                "training": {"global_batch_size": 8, "seq_length": 256},
            },
        ),
    ],
)
def test_candidate_examples_evaluate(index: int, request_doc: dict[str, object]) -> None:
    request = PlanRequest.model_validate(request_doc)
    candidate = Candidate.model_validate(examples()[index])
    checked = check_candidate(request, candidate)
    prediction = evaluate(request, checked)
    assert prediction.step_time_s > 0
    assert checked.stages is not None and len(checked.stages) == candidate.pp * candidate.vpp


def test_explicit_stages_cover_embedding_blocks_and_head() -> None:
    # the doc's split example covers layers 0 .. num_layers + 2 of a 4-block model: one layer
    # short is refused, so the doc's statement of the layer list is the spec's
    short = dict(examples()[2])
    short["stages"] = [{"layers": [0, 3]}, {"layers": [3, 5]}]
    request = PlanRequest.model_validate(
        {
            "model": {
                "family": "gpt",
                "num_layers": 4,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "vocab_size": 1024,
            },
            "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2},
            "training": {"global_batch_size": 8, "seq_length": 256},
        }
    )
    with pytest.raises(ValueError):
        check_candidate(request, Candidate.model_validate(short))
