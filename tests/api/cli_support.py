"""Run the real `meshplan` entry point in a subprocess, with this checkout importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def meshplan_argv() -> list[str]:
    """The installed console script when there is one (as a user runs it), else its code."""
    script = Path(sys.executable).with_name("meshplan")
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "from api.cli import main; main()"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLAN_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


def meshplan(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """`meshplan ARGS` with stdout and stderr captured (pipes: not a terminal)."""
    return subprocess.run(
        [*meshplan_argv(), *args],
        env=env if env is not None else cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single `error: ...` line a user error prints on stderr (asserting that form)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == "", proc.stdout
    return lines[0]


def json_error(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON error document a --json user error prints on stdout (stderr stays empty)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == "", proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str), doc
    return doc


def write_json(path: Path, doc: Any) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def run_on_terminal(
    args: list[str], timeout_s: float = 120.0, columns: int = 160
) -> tuple[int, str, str]:
    """`meshplan ARGS` with stderr on a pseudo-terminal `columns` wide: (exit code, stdout,
    terminal text)."""
    import pty
    import threading

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*meshplan_argv(), *args],
        env=cli_env(TERM="xterm", COLUMNS=str(columns)),
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    stdout, _ = proc.communicate(timeout=timeout_s)
    reader.join(timeout=10)
    os.close(master)
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")
