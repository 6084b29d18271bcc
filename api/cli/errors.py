"""User errors of the `meshplan` CLI, and the one wrapper every command runs inside.

A user error prints one line on stderr, `error: <what is wrong>; <what to do>`, and exits 2
(or the code the command chose); with `--json` it prints a JSON document on stdout instead,
`{"error": ..., ...}`. Never a traceback: tracebacks are for bugs.

`guard(callback)` turns into that form, whatever command raised it:
- `CliError` (what `api.cli.output.fail` raises),
- `OSError` naming a file (a folder that does not exist, a file where a folder is expected, no
  permission): the path the user wrote and the reason,
- an invalid service setting (`api.settings.Settings` read from `MESHPLAN_*`): the variable's
  name and the reason, never its value (it may be a secret),
- a database URL that does not parse, or a database that cannot be opened (exit 1),
- Ctrl-C: `interrupted`, exit 130.
Before the command runs, it checks the files and folders the command will write (parameters
named in `OUTPUT_FILE_PARAMS` / `OUTPUT_DIR_PARAMS`, see `api.cli.files`), so that a long search
does not fail at its end on a mistyped `--svg` folder.
"""

from __future__ import annotations

import errno
import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

# The name of every command's --json parameter (as the function receives it).
JSON_PARAM = "as_json"

# Exit status of an interrupted command (128 + SIGINT), as shells report it.
INTERRUPTED_EXIT = 130


class CliError(Exception):
    """A user error: `message` is the one line shown; `doc` the JSON document with --json."""

    def __init__(self, message: str, *, code: int = 2, doc: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.doc = doc if doc is not None else {"error": message}


def report(error: CliError, *, as_json: bool) -> None:
    """Print `error` the way the caller asked: JSON on stdout, or one line on stderr."""
    if as_json:
        typer.echo(json.dumps(error.doc, indent=2))
    else:
        typer.echo(f"error: {error.message}", err=True)


def os_error(exc: OSError) -> CliError:
    """A file-system error as one line naming the path and the reason."""
    path = exc.filename if exc.filename is not None else "?"
    reason = exc.strerror or str(exc)
    hint = {
        errno.ENOENT: "check the path (folders are not created for you)",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EISDIR: "give a file name, not a folder",
        errno.EACCES: "choose a place you may write to",
        errno.EROFS: "choose a place you may write to",
    }.get(exc.errno or 0, "check the path")
    message = f"{path}: {reason}; {hint}"
    return CliError(message, doc={"error": message, "path": str(path), "reason": reason})


def settings_error(exc: Exception) -> CliError | None:
    """An invalid `MESHPLAN_*` setting as one line, or None when `exc` is not one."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    if isinstance(exc, SettingsError):
        message = f"invalid service setting: {exc}; fix the MESHPLAN_* environment variable"
        return CliError(message, doc={"error": "invalid setting", "detail": str(exc)})
    if not isinstance(exc, ValidationError) or exc.title != "Settings":
        return None
    problems = []
    for err in exc.errors(include_input=False):
        name = "MESHPLAN_" + "_".join(str(p) for p in err["loc"]).upper()
        reason = err["msg"].removeprefix("Value error, ")
        problems.append({"variable": name, "reason": reason})
    text = "; ".join(f"{p['variable']}: {p['reason']}" for p in problems)
    message = f"invalid service setting: {text}; fix the environment variable and retry"
    return CliError(message, doc={"error": "invalid setting", "settings": problems})


def database_error(exc: Exception) -> CliError | None:
    """A database URL that does not parse (exit 2) or a database that cannot be opened (exit
    1) as one line, or None when `exc` is neither. The URL is not printed (it may hold a
    password)."""
    from sqlalchemy.exc import ArgumentError, OperationalError

    if isinstance(exc, ArgumentError):
        message = (
            f"MESHPLAN_DATABASE_URL: {exc}; give a SQLAlchemy URL such as "
            "sqlite:///./meshplan.db or postgresql+psycopg://user@host:5432/db"
        )
        return CliError(message, doc={"error": "invalid setting", "detail": str(exc)})
    if isinstance(exc, OperationalError):
        reason = " ".join(str(exc.orig).split()) if exc.orig is not None else str(exc)
        message = (
            f"cannot open the database: {reason}; check MESHPLAN_DATABASE_URL and that the "
            "database server is running"
        )
        return CliError(message, code=1, doc={"error": "database unavailable", "detail": reason})
    return None


def _as_cli_error(exc: BaseException) -> CliError | None:
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, OSError) and exc.filename is not None:
        return os_error(exc)
    if not isinstance(exc, Exception):
        return None
    # Each check imports its library only when the command already did.
    if "pydantic_settings" in sys.modules and (error := settings_error(exc)) is not None:
        return error
    if "sqlalchemy" in sys.modules:
        return database_error(exc)
    return None


def guard(callback: F) -> F:
    """`callback` with user errors reported in one line (or JSON) instead of a traceback."""

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get(JSON_PARAM, False))
        try:
            from api.cli.files import check_outputs

            check_outputs(kwargs)
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            report(CliError("interrupted", code=INTERRUPTED_EXIT), as_json=as_json)
            raise typer.Exit(INTERRUPTED_EXIT) from None
        except Exception as exc:
            error = _as_cli_error(exc)
            if error is None:
                raise
            report(error, as_json=as_json)
            raise typer.Exit(error.code) from None

    run.__guarded__ = True  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]
