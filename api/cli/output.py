"""Shared CLI output helpers: JSON for scripts, readable text for people, clean errors."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError


def emit_json(doc: Any) -> None:
    if isinstance(doc, BaseModel):
        doc = doc.model_dump(mode="json")
    typer.echo(json.dumps(doc, indent=2, sort_keys=False))


def fail(
    message: str, *, code: int = 2, doc: dict[str, Any] | None = None, as_json: bool = False
) -> NoReturn:
    """Print an error (as a JSON document with --json) and exit non-zero."""
    if as_json:
        typer.echo(json.dumps(doc or {"error": message}, indent=2))
    else:
        typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def describe_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})"[:400])
    return "; ".join(lines)


def read_json_file(path: str) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        fail(f"file not found: {path}")
    except json.JSONDecodeError as exc:
        fail(f"{path} is not valid JSON: {exc}")


def stderr(message: str) -> None:
    print(message, file=sys.stderr)
