"""The `meshplan` command. Each sub-command lives in its own module with a `register(app)`.

Commands in `LAZY_COMMANDS` are imported only when they run (`api.cli.group`), so that
`meshplan bubble` does not pay for OR-Tools, FastAPI or torch; modules in `COMMAND_MODULES`
are imported at start-up. Either way every command runs inside `api.cli.errors.guard`.
"""

from __future__ import annotations

import importlib

import typer

from api.cli.group import LazyCommand, MeshplanGroup

# name -> the module whose register(app) adds it, and the one line `meshplan --help` shows
# (the first sentence of the command's docstring; tests/api/test_cli_startup.py compares them).
LAZY_COMMANDS = {
    c.name: c
    for c in (
        LazyCommand(
            "bubble",
            "api.cli.bubble",
            "Step time, bubble and in-flight micro-batches of a pipeline schedule, simulated.",
        ),
        LazyCommand(
            "evaluate",
            "api.cli.evaluate",
            "Predict step time, throughput, bubble and per-GPU memory of one candidate.",
        ),
        LazyCommand(
            "plan",
            "api.cli.plan",
            "Search the fastest plan (or the smallest bubble) that fits the memory cap.",
        ),
        LazyCommand(
            "serve",
            "api.cli.serve",
            "Run the plan service (settings from MESHPLAN_* environment variables).",
        ),
        LazyCommand(
            "worker",
            "api.cli.worker",
            "Run search tasks from the PostgreSQL queue until SIGTERM (settings from MESHPLAN_*).",
        ),
        LazyCommand("db", "api.cli.serve", "Database migrations (Alembic)."),
        LazyCommand("keys", "api.cli.serve", "API keys."),
        LazyCommand(
            "launch",
            "api.cli.launch",
            "Launch configs for a plan: one torchrun command per node, an sbatch script, or "
            "Kubeflow manifests, with the arguments of the chosen training framework.",
        ),
        LazyCommand(
            "profile",
            "api.cli.profile",
            "Measure per-layer time and memory on this machine -> a ModelProfile.",
        ),
        LazyCommand(
            "profile-network",
            "api.cli.profile",
            "Measure collective bandwidth and latency with torchrun -> ClusterSpec link figures.",
        ),
        LazyCommand(
            "submit",
            "api.cli.submit",
            "Submit a plan to Slurm or Kubernetes through the service (plan it first with "
            "--request).",
        ),
        LazyCommand(
            "submissions", "api.cli.submissions", "Submissions of plans to cluster schedulers."
        ),
        LazyCommand(
            "calibrate",
            "api.cli.calibrate",
            "Fit the cost model's constants to measured step times (least squares on log time).",
        ),
    )
}


class _Group(MeshplanGroup):
    LAZY = LAZY_COMMANDS


app = typer.Typer(
    name="meshplan",
    help="Plan tensor/pipeline/data parallel training, and launch it.",
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    # A bug's traceback stays short and never prints local variables (API keys, settings).
    pretty_exceptions_show_locals=False,
    pretty_exceptions_short=True,
)


@app.callback()
def _root() -> None:
    """Plan tensor/pipeline/data parallel training, and launch it."""
    # A callback keeps `meshplan <command>` a command group even while one command exists.


# Modules imported at start-up; each defines register(app: typer.Typer) -> None. A module
# listed here that is not written yet is skipped.
COMMAND_MODULES: tuple[str, ...] = ()

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
