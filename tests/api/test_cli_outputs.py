"""What the real `meshplan` says about the files it wrote, and its progress on a terminal."""

from __future__ import annotations

import json
from pathlib import Path

import cli_support
from cli_support import meshplan, write_json
from svc_factories import tiny_request

BUBBLE = ["bubble", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8"]
BUBBLE += ["--fw-s", "1", "--bw-s", "2"]


def test_svg_says_what_it_wrote_on_stderr(tmp_path: Path) -> None:
    svg = tmp_path / "t.svg"
    proc = meshplan(*BUBBLE, "--svg", str(svg))
    assert proc.returncode == 0, proc.stderr
    assert svg.read_text().startswith("<svg")
    size_kib = svg.stat().st_size / 1024
    assert proc.stderr.splitlines() == [f"wrote {svg} ({size_kib:.1f} KiB)"]
    assert "bubble" in proc.stdout and "wrote" not in proc.stdout


def test_json_is_quiet_about_files(tmp_path: Path) -> None:
    svg = tmp_path / "t.svg"
    proc = meshplan(*BUBBLE, "--svg", str(svg), "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["pp"] == 4 and svg.exists()


def test_launch_output_folder_is_one_line(tmp_path: Path) -> None:
    # planned for the runner it launches with (a free search may pick cp with ZeRO-1)
    request = write_json(
        tmp_path / "request.json", tiny_request(constraints={"framework": "meshplan"})
    )
    planned = meshplan("plan", "--request", request, "--json")
    assert planned.returncode == 0, planned.stderr
    (tmp_path / "plan.json").write_text(planned.stdout)
    out = tmp_path / "new" / "launch"
    args = ["launch", "--plan-file", str(tmp_path / "plan.json"), "--target", "torchrun"]
    proc = meshplan(*args, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"wrote {len(names)} files to {out}: {', '.join(names)} (")
    assert "torchrun" in proc.stdout


def run_on_terminal(args: list[str]) -> tuple[int, str, str]:
    return cli_support.run_on_terminal(args, columns=100)


def test_search_progress_on_a_terminal_only(tmp_path: Path) -> None:
    request = write_json(tmp_path / "request.json", tiny_request())
    code, stdout, terminal = run_on_terminal(["plan", "--request", request])
    assert code == 0, terminal
    assert "searching" in terminal and "%" in terminal
    assert "searching" not in stdout and "tp=" in stdout
    code, stdout, terminal = run_on_terminal(["plan", "--request", request, "--json"])
    assert code == 0 and "searching" not in terminal
    assert json.loads(stdout)["plan"]["num_gpus"] == 4
    piped = meshplan("plan", "--request", request)
    assert piped.returncode == 0 and piped.stderr == ""
