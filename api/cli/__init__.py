"""The `meshplan` command. Each sub-command lives in its own module with a `register(app)`."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="meshplan",
    help="Plan tensor/pipeline/data parallel training, and launch it.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Plan tensor/pipeline/data parallel training, and launch it."""
    # A callback keeps `meshplan <command>` a command group even while one command exists.

# One module per command group; each defines register(app: typer.Typer) -> None.
COMMAND_MODULES = (
    "api.cli.bubble",
    "api.cli.evaluate",
    "api.cli.plan",
    "api.cli.serve",
    "api.cli.launch",
    "api.cli.profile",
    "api.cli.submit",
    "api.cli.submissions",
)

for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as exc:  # a command whose module is not written yet
        if exc.name != _name:
            raise
        continue
    _module.register(app)


def main() -> None:
    app()
