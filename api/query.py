"""Query parameters read as one pydantic model: validated in one pass of pydantic-core, and
described in the OpenAPI document as FastAPI describes single query parameters.

FastAPI resolves each declared query parameter on every request through its dependency
machinery (annotation inspection per field and per request): with the history's 17 parameters
that costs about a third of a history page's CPU (bench/api_profile.py). A route that reads its
parameters with `read_query` declares them with `openapi_extra=query_openapi(Model)`; a value
that does not validate is the same `RequestValidationError` (location `query.<name>`) that
FastAPI raises, so it becomes the same 422 in `api/problems.py`."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def read_query(model: type[M], request: Request) -> M:
    """`request`'s query parameters as `model` (parameters it does not name are ignored, as
    FastAPI ignores undeclared ones; a repeated one is refused before, by
    api.middleware.UrlTextMiddleware)."""
    try:
        return model.model_validate(dict(request.query_params))
    except ValidationError as exc:
        errors = [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def query_openapi(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` declaring `model`'s fields as optional query parameters (the model's
    JSON schema per field, as FastAPI writes a parameter's)."""
    schema = model.model_json_schema()
    if "$defs" in schema:
        raise ValueError(f"{model.__name__}: query parameters must have inline schemas")
    required = set(schema.get("required", ()))
    parameters = [
        {"name": name, "in": "query", "required": name in required, "schema": field}
        for name, field in schema["properties"].items()
    ]
    return {"parameters": parameters}
