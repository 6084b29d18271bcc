"""RFC 9457 problem details, and the `responses=` entries every route declares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROBLEM_JSON = "application/problem+json"


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the offending field, e.g. body.cluster.num_gpus")
    message: str
    value: Any = None


class Problem(BaseModel):
    """application/problem+json (RFC 9457). Extension members are allowed."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldError] | None = None


_DESCRIPTIONS = {
    400: "Bad request",
    401: "Missing or invalid API key",
    403: "The key may not do this",
    404: "Not found (or owned by another tenant)",
    406: "Not acceptable",
    409: "Conflict: a request with this Idempotency-Key is still in flight",
    413: "Request body larger than the limit",
    422: "Invalid request (field path and value), or no feasible plan (diagnosis)",
    500: "Internal error (no details leak)",
    503: "Service unavailable",
}


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for a route's problem codes (401, 413, 422, 500 always)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in sorted({*codes, 401, 413, 422, 500}):
        out[code] = {
            "description": _DESCRIPTIONS.get(code, "Problem"),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
    return out
