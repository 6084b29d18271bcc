"""The planning form (`/plans/new`): its fields, the plan request they make, and each
validation error put next to the field it is about.

The form posts `application/x-www-form-urlencoded` (an HTML form's default), parsed here with
the standard library. Every value goes to the same `PlanRequest` that `POST /v1/plans`
validates, so the form accepts and refuses exactly what the API does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from pydantic import ValidationError

from api.schemas.plans import PlanCreate
from planner.catalog.hardware import GPUS
from planner.catalog.presets import PRESETS
from planner.specs.base import SCHEDULES

FRAMEWORK_CHOICES = ("", "meshplan", "megatron", "torchtitan", "deepspeed")
OBJECTIVES = ("time", "bubble")

# form field -> where it goes in the plan request
PATHS: dict[str, tuple[str, ...]] = {
    "gpu": ("cluster", "gpu"),
    "num_gpus": ("cluster", "num_gpus"),
    "gpus_per_node": ("cluster", "gpus_per_node"),
    "intra_node_gbps": ("cluster", "intra_node_gbps"),
    "inter_node_gbps": ("cluster", "inter_node_gbps"),
    "global_batch_size": ("training", "global_batch_size"),
    "seq_length": ("training", "seq_length"),
    "memory_cap_gib": ("constraints", "memory_cap_gib"),
    "framework": ("constraints", "framework"),
    "schedules": ("constraints", "schedules"),
    "objective": ("objective",),
    "time_limit_s": ("search", "time_limit_s"),
    "top_k": ("search", "top_k"),
    "tags": ("tags",),
}
FIELDS = ("model_source", "preset", "model_json", *PATHS)
DEFAULTS: dict[str, str] = {
    "model_source": "preset",
    "preset": "llama-3-8b",
    "gpu": "H100-SXM-80GB",
    "num_gpus": "64",
    "gpus_per_node": "8",
    "global_batch_size": "512",
    "seq_length": "4096",
    "objective": "time",
    "time_limit_s": "30",
    "top_k": "5",
}


@dataclass
class FormState:
    """The values as typed (to fill the form again) and the errors by field ('' = the form)."""

    values: dict[str, str]
    schedules: tuple[str, ...] = ()
    errors: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)


def choices() -> dict[str, Any]:
    """What the form offers: the catalog's presets and GPUs, schedules, frameworks."""
    return {
        "presets": list(PRESETS.values()),
        "gpus": sorted(GPUS),
        "schedules": SCHEDULES,
        "frameworks": FRAMEWORK_CHOICES,
        "objectives": OBJECTIVES,
    }


def parse_body(body: bytes) -> FormState:
    raw = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    values = {k: v[-1].strip() for k, v in raw.items() if k in FIELDS and k != "schedules"}
    return FormState(values=values, schedules=tuple(raw.get("schedules", ())))


def blank() -> FormState:
    return FormState(values=dict(DEFAULTS))


def build_request(form: FormState) -> PlanCreate | None:
    """The plan request the form describes, or None with `form.errors` filled."""
    doc: dict[str, Any] = {}
    model = _model(form)
    if model is not None:
        doc["model"] = model
    for name, path in PATHS.items():
        value: Any = form.schedules if name == "schedules" else form.values.get(name, "")
        if name == "tags":
            value = [t.strip() for t in str(value).split(",") if t.strip()]
        if value in ("", (), []):
            continue
        _put(doc, path, list(value) if name == "schedules" else value)
    if form.errors:
        return None
    try:
        return PlanCreate.model_validate(doc)
    except ValidationError as exc:
        for err in exc.errors():
            place_error(form, tuple(str(p) for p in err["loc"]), _message(err))
        return None


def _model(form: FormState) -> Any:
    if form.values.get("model_source", "preset") == "json":
        text = form.values.get("model_json", "")
        if not text:
            form.add("model_json", "paste a model (a family spec or a profile) as JSON")
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            form.add("model_json", f"malformed JSON at line {exc.lineno} column {exc.colno}")
            return None
        except RecursionError:
            form.add("model_json", "the JSON nests too deeply")
            return None
        if not isinstance(doc, dict):
            form.add("model_json", f"a JSON object is needed, not {type(doc).__name__}")
            return None
        is_ref = "family" in doc or "profile" in doc or "profile_id" in doc
        return doc if is_ref else {"profile": doc}
    name = form.values.get("preset", "")
    if name not in PRESETS:
        form.add("preset", f"unknown preset {name!r}; choose one of {list(PRESETS)}")
        return None
    return PRESETS[name].model_dump(mode="json")


def _put(doc: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for part in path[:-1]:
        doc = doc.setdefault(part, {})
    doc[path[-1]] = value


def _message(err: Mapping[str, Any]) -> str:
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


_BY_PATH = {path: name for name, path in PATHS.items()}
_NAMED = re.compile(r"\b(?:(cluster|training|constraints|search)\.)?([a-z_]+)=")


def place_error(form: FormState, loc: Iterable[str], message: str) -> None:
    """Put an error at the form field its location (or, for a whole-request rule, the first
    field its message names, e.g. 'constraints.memory_cap_gib=90 exceeds ...') is about."""
    parts = tuple(p for p in loc if p not in ("body", "arch", "profile") and not p.isdigit())
    if parts and parts[0] == "model":
        json_model = form.values.get("model_source") == "json"
        form.add("model_json" if json_model else "preset", message)
        return
    for n in range(len(parts), 0, -1):
        name = _BY_PATH.get(parts[:n])
        if name is not None:
            form.add(name, message)
            return
    section = parts[0] if parts else None
    for m in _NAMED.finditer(message):
        prefix, attr = m.group(1), m.group(2)
        for name, path in PATHS.items():
            if path[-1] == attr and (prefix or section) in (None, path[0]):
                form.add(name, message)
                return
    form.add("", message)


def place_problem(form: FormState, problem: Mapping[str, Any]) -> None:
    """A problem document's errors (or its detail) at the fields they name."""
    errors = problem.get("errors") or []
    for err in errors:
        loc = str(err.get("field", "")).replace("body.", "").split(".")
        place_error(form, loc, str(err.get("message", problem.get("detail", ""))))
    if not errors:
        form.add("", f"{problem.get('title', 'Refused')}: {problem.get('detail', '')}")
