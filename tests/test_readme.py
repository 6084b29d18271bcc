"""The README's commands run as written on a fresh checkout.

The commands are read out of the README's fenced blocks (never copied here), in a temporary
directory that holds the checkout's `.venv` (as a link) and the JSON files the README shows,
with `.venv/bin` first on the PATH as `. .venv/bin/activate` puts it. The Quickstart block is
not run: its two commands install (`make serve`, `make test`), which is what got this test
here. The service the README's `curl` lines talk to is the one `make serve` starts
(`meshplan serve --dev-open` on 127.0.0.1:8000, SQLite in the working directory); the test
starts it the same way and needs port 8000 free. `xdg-open URL` (a browser) is checked as a
GET of that URL. The Slurm block runs when the dev cluster is up (`deploy/slurm/dev-cluster.sh
up`, as `.ci/run` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VENV = ROOT / ".venv"
DEV_CLUSTER = ROOT / "deploy" / "slurm" / "dev-cluster.sh"
URL = "http://127.0.0.1:8000"

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    prose: str  # the text between the previous block and this one


def readme_blocks() -> list[Block]:
    out: list[Block] = []
    at = 0
    text = README.read_text()
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        out.append(Block(m.group(1), m.group(2), text[at : m.start()]))
        at = m.end()
    return out


def commands(block: Block) -> list[str]:
    """The block's command lines, continuation lines joined; comment-only lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    return [c for c in joined.splitlines() if c.strip() and not c.lstrip().startswith("#")]


def json_files() -> dict[str, str]:
    """Each JSON block under the first `name.json` named by the paragraph just before it."""
    files = {}
    for block in readme_blocks():
        if block.lang == "json":
            paragraph = block.prose.strip().split("\n\n")[-1]
            names = re.findall(r"`([\w.-]+\.json)`", paragraph)
            assert names, f"a JSON block in the README names no file before it: {block.text[:60]}"
            json.loads(block.text)  # it is valid JSON as shown
            files[names[0]] = block.text
    return files


def bash_blocks() -> list[Block]:
    return [b for b in readme_blocks() if b.lang == "bash"]


def block_with(first_word: str) -> Block:
    return next(b for b in bash_blocks() if any(c.startswith(first_word) for c in commands(b)))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    if not (VENV / "bin" / "meshplan").exists():
        pytest.fail(f"{VENV}/bin/meshplan is missing: the README's commands need `make install`")
    (tmp_path / ".venv").symlink_to(VENV)
    for name, text in json_files().items():
        (tmp_path / name).write_text(text)
    return tmp_path


def environment(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{workdir / '.venv' / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = str(ROOT)  # the checkout under test, as the editable install points
    env.pop("MESHPLAN_DATABASE_URL", None)
    return env


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def service(workdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`make serve`'s command in the working directory."""
    if not port_free(8000):
        pytest.skip("port 8000 is taken: the README's curl lines talk to 127.0.0.1:8000")
    log = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        ["meshplan", "serve", "--dev-open"],
        cwd=workdir,
        env=environment(workdir),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    wait_healthy(proc, workdir)
    yield proc
    stop(proc)


def wait_healthy(proc: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"meshplan serve exited: {(workdir / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{URL}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail("meshplan serve did not answer /healthz within 60 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_script(lines: list[str], workdir: Path, timeout_s: float) -> list[tuple[str, int, str]]:
    """Run `lines` in one bash (variables carry over), each one's stdout, stderr and exit
    status kept: [(line, rc, stdout)]."""
    script = []
    for i, line in enumerate(lines):
        if line.startswith("xdg-open "):
            line = "curl -sf -o /dev/null " + line.removeprefix("xdg-open ")
        # the newline ends a trailing `# comment` before the redirections
        script.append(f"{{ {line}\n}} > out.{i} 2> err.{i}; echo $? > rc.{i}")
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=workdir,
        env=environment(workdir),
        timeout=timeout_s,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    results = []
    for i, line in enumerate(lines):
        rc = int((workdir / f"rc.{i}").read_text())
        err = (workdir / f"err.{i}").read_text()
        assert rc == 0, f"README line failed (exit {rc}): {line}\n{err[-3000:]}"
        results.append((line, rc, (workdir / f"out.{i}").read_text()))
    return results


def test_quickstart_is_exactly_the_two_setup_commands() -> None:
    first = bash_blocks()[0]
    assert [c.split("#")[0].strip() for c in commands(first)] == ["make serve", "make test"]
    assert "chromium" in first.text and "apt-get" in README.read_text()


def test_command_line_block_runs_as_written(workdir: Path) -> None:
    block = block_with("meshplan plan")
    run_script(commands(block), workdir, timeout_s=1200)
    plan = json.loads((workdir / "plan.json").read_text())
    assert plan["plan"]["tp"] * plan["plan"]["pp"] * plan["plan"]["dp"] == 1024
    ET.parse(workdir / "timeline.svg")
    ET.parse(workdir / "t.svg")
    assert any((workdir / "launch").rglob("*.sh")) or any((workdir / "launch").iterdir())
    assert json.loads((workdir / "profile.json").read_text())["layers"]
    report = json.loads((workdir / "report.json").read_text())
    assert report["step_time_s"] > 0


def test_service_block_runs_as_written(workdir: Path, service: subprocess.Popen[bytes]) -> None:
    block = block_with("ID=$(curl")
    results = run_script(commands(block), workdir, timeout_s=600)
    for line, _, out in results:
        if line.startswith("curl -s '") or line.startswith('curl -s "'):
            body = json.loads(out)  # each JSON answer parses, and is not an error document
            assert not (isinstance(body, dict) and "status" in body and "title" in body), out
    with tarfile.open(workdir / "launch.tar.gz") as tar:
        assert tar.getnames()


@pytest.mark.slurm
def test_slurm_block_runs_as_written(workdir: Path) -> None:
    if subprocess.run([str(DEV_CLUSTER), "status"], capture_output=True).returncode != 0:
        pytest.skip("the dev Slurm cluster is down (deploy/slurm/dev-cluster.sh up)")
    if not port_free(8000):
        pytest.skip("port 8000 is taken: the README's Slurm block serves on 127.0.0.1:8000")
    block = block_with("MESHPLAN_SUBMISSION_TENANTS")
    log_path = workdir / "slurm-block.log"
    with log_path.open("wb") as log:
        # the block's `meshplan serve ... &` outlives the bash that started it: wait for the
        # bash, then stop its process group
        proc = subprocess.Popen(
            ["bash", "-c", "set -e\n" + "\n".join(commands(block))],
            cwd=workdir,
            env=environment(workdir),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=600)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    out = log_path.read_text()
    assert rc == 0, out[-3000:]
    assert "COMPLETED" in out or "completed" in out, out[-3000:]
