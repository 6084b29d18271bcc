"""Files the CLI writes: checked before a command runs, announced after it wrote them.

A command's output parameters are found by name, so that every command (present and future)
gets the check from `api.cli.errors.guard` without code of its own:
- `OUTPUT_FILE_PARAMS`: a file to write (`--svg`, `-o/--output` of `profile`); its folder must
  exist and be writable, and the path must not be a folder;
- `OUTPUT_DIR_PARAMS`: a folder to write files into (`launch -o`); it is created if missing, so
  its nearest existing ancestor must be a writable folder.
What was written is said in one line on stderr (stdout stays the command's result), and not at
all with `--json`, whose document names its outputs itself.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from api.cli.errors import CliError

OUTPUT_FILE_PARAMS = ("svg", "output")
OUTPUT_DIR_PARAMS = ("out_dir",)


def _refuse(path: Path, reason: str, hint: str) -> CliError:
    message = f"cannot write {path}: {reason}; {hint}"
    return CliError(message, doc={"error": message, "path": str(path), "reason": reason})


def check_output_file(path: Path) -> None:
    """Raise CliError unless `path` can be written as a file."""
    if path.is_dir():
        raise _refuse(path, "it is a folder", "give a file name")
    folder = path.parent
    if not folder.exists():
        raise _refuse(path, f"the folder {folder} does not exist", "create it or choose another")
    if not folder.is_dir():
        raise _refuse(path, f"{folder} is a file, not a folder", "choose another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _refuse(path, "permission denied", "choose a place you may write to")


def check_output_dir(path: Path) -> None:
    """Raise CliError unless files can be written under `path` (created if missing)."""
    if path.exists() and not path.is_dir():
        raise _refuse(path, "it is a file, not a folder", "give a folder for the files")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise _refuse(path, f"{existing} is a file, not a folder", "choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _refuse(path, f"permission denied in {existing}", "choose a folder you may write to")


def check_outputs(params: Mapping[str, Any]) -> None:
    """Check every output path among a command's parameters (see the module docstring)."""
    for name in OUTPUT_FILE_PARAMS:
        if isinstance(params.get(name), Path):
            check_output_file(params[name])
    for name in OUTPUT_DIR_PARAMS:
        if isinstance(params.get(name), Path):
            check_output_dir(params[name])


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1024:.1f} KiB" if n_bytes >= 1024 else f"{n_bytes} bytes"


def announce(paths: Sequence[Path], *, as_json: bool) -> None:
    """One line on stderr naming what was written (nothing with --json)."""
    if as_json or not paths:
        return
    total = sum(p.stat().st_size for p in paths)
    if len(paths) == 1:
        typer.echo(f"wrote {paths[0]} ({_size(total)})", err=True)
        return
    folder = os.path.commonpath([str(p.parent) for p in paths])
    names = ", ".join(os.path.relpath(p, folder) for p in paths)
    typer.echo(f"wrote {len(paths)} files to {folder}: {names} ({_size(total)})", err=True)


def write_output(path: Path, text: str, *, as_json: bool) -> None:
    """Write `text` to `path` and say so (OSError becomes one line in `guard`)."""
    try:
        path.write_text(text)
    except IsADirectoryError as exc:
        raise _refuse(path, "it is a folder", "give a file name") from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise _refuse(path, "no space left on the device", "free some space") from exc
        raise
    announce([path], as_json=as_json)
