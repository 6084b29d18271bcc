"""Every invalid value in a spec raises an error that names the field and the value."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from planner.specs import (
    Candidate,
    ClusterSpec,
    Constraints,
    ModelArch,
    ModelProfile,
    PlanRequest,
    ProfileRef,
    SearchOptions,
    StageSpec,
    TrainingSpec,
)

ARCH: dict[str, Any] = {
    "family": "gpt",
    "num_layers": 4,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "vocab_size": 1000,
}
CLUSTER: dict[str, Any] = {"gpu": "A100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8}
TRAINING: dict[str, Any] = {"global_batch_size": 64, "seq_length": 1024}
REQUEST: dict[str, Any] = {"model": ARCH, "cluster": CLUSTER, "training": TRAINING}
COST: dict[str, Any] = {
    "fw_s": 1.0,
    "bw_input_s": 1.0,
    "bw_weight_s": 1.0,
    "recompute_s": {"none": 0, "selective": 0, "full": 1},
    "activation_bytes": {"none": 3, "selective": 2, "full": 1},
    "param_bytes": 8,
    "param_count": 4,
    "output_bytes": 2,
}
PROFILE: dict[str, Any] = {
    "name": "p",
    "source": "measured",
    "seq_length": 1024,
    "layers": [{"name": "l0", "kind": "block"}, {"name": "l1", "kind": "head"}],
    "points": [{"micro_batch_size": 1, "kinds": {"block": COST, "head": COST}}],
}


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `base` with the dotted `path` set to `value`."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return doc


CASES: list[tuple[str, type[BaseModel], dict[str, Any], str, Any]] = [
    # (id, spec, document, field named, value named)
    ("layers-zero", ModelArch, with_(ARCH, "num_layers", 0), "num_layers", 0),
    ("hidden-negative", ModelArch, with_(ARCH, "hidden_size", -8), "hidden_size", -8),
    ("heads-not-dividing", ModelArch, with_(ARCH, "num_attention_heads", 12),
     "num_attention_heads", 12),
    ("kv-not-dividing", ModelArch, with_(ARCH, "num_kv_heads", 5), "num_kv_heads", 5),
    ("vocab-zero", ModelArch, with_(ARCH, "vocab_size", 0), "vocab_size", 0),
    ("unknown-family", ModelArch, with_(ARCH, "family", "bert"), "family", "bert"),
    ("llama-needs-ffn", ModelArch, with_(ARCH, "family", "llama"), "ffn_hidden_size", None),
    ("unknown-gpu", ClusterSpec, with_(CLUSTER, "gpu", "B300"), "gpu", "B300"),
    ("gpus-zero", ClusterSpec, with_(CLUSTER, "num_gpus", 0), "num_gpus", 0),
    ("gpus-not-whole-nodes", ClusterSpec, with_(CLUSTER, "num_gpus", 12), "num_gpus", 12),
    ("link-negative", ClusterSpec, with_(CLUSTER, "inter_node_gbps", -1), "inter_node_gbps", -1),
    ("batch-zero", TrainingSpec, with_(TRAINING, "global_batch_size", 0), "global_batch_size", 0),
    ("seq-negative", TrainingSpec, with_(TRAINING, "seq_length", -5), "seq_length", -5),
    ("unknown-dtype", TrainingSpec, with_(TRAINING, "dtype", "fp8"), "dtype", "fp8"),
    ("unknown-optimizer", TrainingSpec, with_(TRAINING, "optimizer", "lion"), "optimizer", "lion"),
    ("cap-above-gpu", PlanRequest, with_(REQUEST, "constraints.memory_cap_gib", 100),
     "memory_cap_gib", 100),
    ("cap-zero", PlanRequest, with_(REQUEST, "constraints.memory_cap_gib", 0),
     "memory_cap_gib", 0),
    ("reserve-above-cap", PlanRequest,
     with_(with_(REQUEST, "constraints.memory_cap_gib", 4), "constraints.memory_reserve_gib", 4),
     "memory_reserve_gib", 4),
    ("unknown-schedule", PlanRequest, with_(REQUEST, "constraints.schedules", ["pipedream"]),
     "schedules", "pipedream"),
    ("batch-not-divisible-by-mbs", PlanRequest,
     with_(REQUEST, "constraints.micro_batch_sizes", [3, 5]), "global_batch_size", 64),
    ("tp-not-dividing-heads", PlanRequest, with_(REQUEST, "constraints.tp", [3]), "tp", 3),
    ("pp-not-dividing-gpus", PlanRequest, with_(REQUEST, "constraints.pp", [3, 5]), "pp", 3),
    ("tp-nonpositive", PlanRequest, with_(REQUEST, "constraints.tp", [0, 2]), "tp", 0),
    ("zero-stage-4", PlanRequest, with_(REQUEST, "constraints.zero_stages", [4]),
     "zero_stages", 4),
    ("unknown-recompute", PlanRequest, with_(REQUEST, "constraints.recompute", ["some"]),
     "recompute", "some"),
    ("unknown-objective", PlanRequest, with_(REQUEST, "objective", "speed"), "objective", "speed"),
    ("time-limit-zero", PlanRequest, with_(REQUEST, "search.time_limit_s", 0), "time_limit_s", 0),
    ("profile-seq-mismatch", PlanRequest,
     with_(REQUEST, "model", {"profile": with_(PROFILE, "seq_length", 512)}), "seq_length", 512),
    ("profile-missing-kind", ModelProfile,
     with_(PROFILE, "points", [{"micro_batch_size": 1, "kinds": {"block": COST}}]),
     "points[0]", "head"),
    ("profile-negative-time", ModelProfile,
     with_(PROFILE, "points", [{"micro_batch_size": 1,
                                "kinds": {"block": with_(COST, "fw_s", -1), "head": COST}}]),
     "fw_s", -1),
    ("profile-unknown-source", ModelProfile, with_(PROFILE, "source", "guessed"), "source",
     "guessed"),
    ("unknown-candidate-schedule", Candidate, {"schedule": "pipedream"}, "schedule", "pipedream"),
    ("interleaved-vpp-1", Candidate, {"schedule": "interleaved-1f1b", "vpp": 1}, "vpp", 1),
    ("zbv-vpp-3", Candidate, {"schedule": "zbv", "vpp": 3, "pp": 2}, "vpp", 3),
    ("1f1b-vpp-2", Candidate, {"schedule": "1f1b", "vpp": 2}, "vpp", 2),
    ("sp-without-tp", Candidate, {"sequence_parallel": True, "tp": 1}, "tp", 1),
    ("zero2-with-pp", Candidate, {"zero_stage": 2, "pp": 2}, "zero_stage", 2),
    ("zero-stage-5", Candidate, {"zero_stage": 5}, "zero_stage", 5),
    ("mbs-zero", Candidate, {"micro_batch_size": 0}, "micro_batch_size", 0),
    ("stage-count", Candidate, {"pp": 2, "stages": [{"layers": [0, 4]}]}, "len(stages)", 1),
    ("stage-gap", Candidate,
     {"pp": 2, "stages": [{"layers": [0, 2]}, {"layers": [3, 4]}]}, "stages[1].layers[0]", 3),
    ("stage-empty", StageSpec, {"layers": [3, 3]}, "layers", 3),
    ("stage-recompute-length", StageSpec, {"layers": [0, 3], "recompute": ["none"]},
     "len(recompute)", 1),
    ("profile-ref-both", ProfileRef, {"profile": PROFILE, "profile_id": "x"}, "profile_id", "x"),
    ("search-top-k", SearchOptions, {"top_k": -1}, "top_k", -1),
    ("constraints-vpp-empty", Constraints, {"vpp": []}, "vpp", "[]"),
]  # fmt: skip


def _mentions(err: dict[str, Any], field: str, value: Any) -> bool:
    """The error's location names the field and its input is the value, or its message
    says `field=value` (possibly inside a list: `field=[value, ...]`)."""
    loc = [str(p) for p in err["loc"]]
    given = err.get("input")
    if field in loc and (given == value or (isinstance(given, list) and value in given)):
        return True
    if field in loc and isinstance(value, str) and value in repr(given):
        return True
    msg = err["msg"]
    shown = (f"{field}={value}", f"{field}={value!r}", f"{field}=[{value}", f"{field}=({value}")
    if any(s in msg for s in shown):
        return True
    # a named string value anywhere in a message that names the field: "points[0] ... ['head']"
    return isinstance(value, str) and field in msg and repr(value) in msg


@pytest.mark.parametrize(
    ("spec", "doc", "field", "value"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_invalid_value_names_field_and_value(
    spec: type[BaseModel], doc: dict[str, Any], field: str, value: Any
) -> None:
    with pytest.raises(ValidationError) as info:
        spec.model_validate(doc)
    errors = info.value.errors()
    assert any(_mentions(e, field, value) for e in errors), errors


def test_valid_documents_pass() -> None:
    assert PlanRequest.model_validate(REQUEST).cluster.num_nodes == 2
    assert ModelProfile.model_validate(PROFILE).layers[1].kind == "head"
    assert PlanRequest.model_validate(with_(REQUEST, "model", {"profile": PROFILE})).profile


def test_specs_are_frozen() -> None:
    arch = ModelArch.model_validate(ARCH)
    with pytest.raises(ValidationError):
        arch.num_layers = 5  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ModelArch.model_validate(with_(ARCH, "unknown_field", 1))
