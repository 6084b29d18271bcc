"""The `meshplan` command group: commands imported only when they run, all run inside `guard`.

Importing every command module at start-up costs more than most commands do (the search
imports OR-Tools and pandas, `serve` FastAPI and SQLAlchemy), so the group knows each lazy
command by its name, module and one-line help (`LazyCommand`), lists them from that table for
`meshplan --help`, and imports the module (calling its `register(app)`) only when the command is
resolved. Every command it hands out, lazy or registered eagerly, has its callback wrapped by
`api.cli.errors.guard` (user errors as one line or JSON, never a traceback).
A `--json` usage error (unknown option, bad value) is also a JSON document on stdout.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any, ClassVar

import typer
from typer import _click as click
from typer.core import TyperCommand, TyperGroup

from api.cli.errors import guard


@dataclass(frozen=True)
class LazyCommand:
    """A command (or sub-group) that `module`'s `register(app)` adds under `name`."""

    name: str
    module: str
    help: str


class _Pending(TyperCommand):
    """What `meshplan --help` lists for a lazy command: its name and help, nothing imported."""

    def __init__(self, spec: LazyCommand) -> None:
        super().__init__(name=spec.name, help=spec.help, short_help=spec.help)
        self.spec = spec


def _guard_all(command: click.Command) -> click.Command:
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _guard_all(sub)
    elif command.callback is not None and not getattr(command.callback, "__guarded__", False):
        command.callback = guard(command.callback)
    return command


def load_module_commands(module_name: str) -> dict[str, click.Command]:
    """The click commands that `module_name`'s `register(app)` defines, guarded."""
    module = importlib.import_module(module_name)
    sub_app = typer.Typer()
    module.register(sub_app)
    group = typer.main.get_group(sub_app)
    return {name: _guard_all(cmd) for name, cmd in group.commands.items()}


class MeshplanGroup(TyperGroup):
    """A TyperGroup that adds the commands of `LAZY` and imports them when resolved."""

    LAZY: ClassVar[Mapping[str, LazyCommand]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.commands, *(name for name in self.LAZY if name not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is not None:
            return _guard_all(command)
        spec = self.LAZY.get(cmd_name)
        return _Pending(spec) if spec is not None else None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            name, command, rest = super().resolve_command(ctx, args)
        except click.exceptions.UsageError as exc:
            # TyperGroup suggests from the loaded commands only; suggest from all of them.
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches and "Did you mean" not in exc.message:
                names = ", ".join(repr(m) for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {names}?"
            raise
        if isinstance(command, _Pending):
            self.commands.update(load_module_commands(command.spec.module))
            command = self.commands[command.spec.name]
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        raw_args = [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        except click.exceptions.UsageError as exc:
            if "--json" not in raw_args:
                raise
            doc = {"error": "usage", "detail": exc.format_message()}
            if exc.ctx is not None:
                doc["usage"] = exc.ctx.get_usage()
            typer.echo(json.dumps(doc, indent=2))
            raise typer.Exit(exc.exit_code) from None


__all__ = ["LazyCommand", "MeshplanGroup", "load_module_commands"]
