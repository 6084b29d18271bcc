"""Shared CLI output helpers: JSON for scripts, readable text for people, clean errors."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError

from api.cli.errors import CliError


def emit_json(doc: Any) -> None:
    if isinstance(doc, BaseModel):
        doc = doc.model_dump(mode="json")
    typer.echo(json.dumps(doc, indent=2, sort_keys=False))


def fail(
    message: str, *, code: int = 2, doc: dict[str, Any] | None = None, as_json: bool = False
) -> NoReturn:
    """Stop the command with a user error: one line on stderr, or `doc` (default
    {"error": message}) on stdout when the command got --json (`api.cli.errors.guard` prints
    it; `as_json` is accepted for the callers that pass it and no longer needed)."""
    del as_json  # guard knows it from the command's own --json
    raise CliError(message, code=code, doc=doc)


def describe_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})"[:400])
    return "; ".join(lines)


def read_json_file(path: str) -> Any:
    """The JSON document in `path`; a missing, unreadable or malformed file is a user error
    naming the path (and the line and column of malformed JSON)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        fail(f"{path}: file not found; check the path")
    except IsADirectoryError:
        fail(f"{path} is a folder; give a JSON file")
    except PermissionError:
        fail(f"{path}: permission denied; choose a file you may read")
    except UnicodeDecodeError as exc:
        fail(f"{path} is not text (byte {exc.start} is not UTF-8); give a JSON file")
    except json.JSONDecodeError as exc:
        fail(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            doc={"error": "malformed JSON", "path": path, "line": exc.lineno,
                 "column": exc.colno, "detail": exc.msg},
        )  # fmt: skip


def stderr(message: str) -> None:
    print(message, file=sys.stderr)
