"""Touch-ups of the generated OpenAPI document so that it is complete and valid."""

from __future__ import annotations

from typing import Any

from api.schemas.problem import PROBLEM_JSON

_DEFS = "#/$defs/"
_COMPONENTS = "#/components/schemas/"


def declare_malformed_json(doc: dict[str, Any]) -> None:
    """Operations that take a JSON body answer 400 when it does not parse (api.problems)."""
    problem = {"$ref": _COMPONENTS + "Problem"}
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                operation.setdefault("responses", {}).setdefault(
                    "400",
                    {
                        "description": "Malformed JSON body",
                        "content": {PROBLEM_JSON: {"schema": problem}},
                    },
                )


def hoist_defs(doc: dict[str, Any]) -> None:
    """Move `$defs` left inside hand-written schemas (a pydantic `model_json_schema()` in a
    route's `responses=`) into `components/schemas`, and point their `$ref`s there: a
    `#/$defs/...` reference is dangling at the document's root."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for name, schema in (node.pop("$defs", None) or {}).items():
                schemas.setdefault(name, walk(schema))
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_DEFS):
                node["$ref"] = _COMPONENTS + ref[len(_DEFS) :]
            for key, value in node.items():
                node[key] = walk(value)
        elif isinstance(node, list):
            return [walk(v) for v in node]
        return node

    walk(doc.get("paths", {}))
