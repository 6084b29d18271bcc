"""`meshplan` start-up: a command imports only what it uses (no timing here; the wall times
are bench/cli_startup.py's). The help `meshplan --help` lists without importing a command is
the command's own."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import typer
from cli_support import cli_env

from api.cli import LAZY_COMMANDS, app

HEAVY = ("fastapi", "sqlalchemy", "ortools", "torch", "pandas", "httpx", "uvicorn")

# main() as the console script runs it, then the heavy modules it imported, on stderr.
PROBE = """
import atexit, json, sys
heavy = sys.argv.pop(1).split(",")
atexit.register(lambda: print(json.dumps(sorted(m for m in heavy if m in sys.modules)),
                              file=sys.stderr))
from api.cli import main
main()
"""


def imported_heavy(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(HEAVY), *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stderr.splitlines()[-1]))


def test_bubble_imports_no_heavy_module() -> None:
    args = ["bubble", "--schedule", "1f1b", "--pp", "8", "--microbatches", "32"]
    assert imported_heavy(*args, "--fw-s", "1", "--bw-s", "2") == []


def test_help_imports_no_heavy_module() -> None:
    assert imported_heavy("--help") == []


def test_evaluate_imports_no_heavy_module(tmp_path: Path) -> None:
    from svc_factories import tiny_request

    request, candidate = tmp_path / "r.json", tmp_path / "c.json"
    request.write_text(json.dumps(tiny_request()))
    candidate.write_text(json.dumps({"tp": 2, "pp": 2, "dp": 1}))
    args = ["evaluate", "--request", str(request), "--candidate", str(candidate)]
    assert imported_heavy(*args) == []


def first_sentence(text: str) -> str:
    paragraph = " ".join(text.split("\n\n")[0].split())
    return paragraph if ". " not in paragraph else paragraph.split(". ")[0] + "."


def test_lazy_table_matches_what_the_modules_register() -> None:
    by_module: dict[str, set[str]] = {}
    for spec in LAZY_COMMANDS.values():
        by_module.setdefault(spec.module, set()).add(spec.name)
    for module_name, names in by_module.items():
        sub_app = typer.Typer()
        importlib.import_module(module_name).register(sub_app)
        group = typer.main.get_group(sub_app)
        assert set(group.commands) == names, module_name
        for name in names:
            real_help = group.commands[name].help or ""
            assert LAZY_COMMANDS[name].help == first_sentence(real_help), name


def test_every_listed_command_runs_its_help() -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    listing = runner.invoke(app, ["--help"])
    assert listing.exit_code == 0
    for name in LAZY_COMMANDS:
        assert name in listing.output
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, (name, result.output)


def test_a_mistyped_command_gets_a_suggestion() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["bubbel", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.output)
    assert doc["detail"] == "No such command 'bubbel'. Did you mean 'bubble'?"
