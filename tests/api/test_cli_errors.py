"""User errors of the real `meshplan` entry point: one line on stderr and exit 2, or a JSON
document on stdout with --json; never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import cli_env, json_error, meshplan, one_error_line, write_json
from svc_factories import tiny_request

BUBBLE = ["bubble", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8"]
BUBBLE += ["--fw-s", "1", "--bw-s", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A plan request, the plan `meshplan plan --json` made of it, and a candidate."""
    folder = tmp_path_factory.mktemp("cli")
    request = write_json(folder / "request.json", tiny_request())
    proc = meshplan("plan", "--request", request, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = folder / "plan.json"
    plan.write_text(proc.stdout)
    candidate = write_json(folder / "candidate.json", {"tp": 2, "pp": 2, "dp": 1})
    return {"request": request, "plan": str(plan), "candidate": candidate, "dir": str(folder)}


def test_svg_into_a_missing_folder() -> None:
    line = one_error_line(meshplan(*BUBBLE, "--svg", "/nonexistent/dir/t.svg"))
    assert "/nonexistent/dir/t.svg" in line and "does not exist" in line
    doc = json_error(meshplan(*BUBBLE, "--svg", "/nonexistent/dir/t.svg", "--json"))
    assert doc["path"] == "/nonexistent/dir/t.svg"


def test_output_folder_under_a_file(files: dict[str, str]) -> None:
    args = ["launch", "--plan-file", files["plan"], "--target", "torchrun"]
    line = one_error_line(meshplan(*args, "-o", "/etc/passwd/x"))
    assert "/etc/passwd is a file, not a folder" in line


def test_svg_onto_a_folder_is_checked_before_the_search(files: dict[str, str]) -> None:
    line = one_error_line(meshplan("plan", "--request", files["request"], "--svg", files["dir"]))
    assert f"cannot write {files['dir']}: it is a folder" in line


def test_request_where_a_plan_is_expected(files: dict[str, str]) -> None:
    args = ["launch", "--plan-file", files["request"], "--target", "torchrun"]
    line = one_error_line(meshplan(*args))
    assert "is a plan request, not a plan" in line and "meshplan plan" in line
    doc = json_error(meshplan(*args, "--json"))
    assert doc == {"error": "not a plan", "found": "request"}


def test_plan_where_a_request_is_expected(files: dict[str, str]) -> None:
    line = one_error_line(meshplan("plan", "--request", files["plan"]))
    assert "is a plan (what `meshplan plan --json` prints), not a plan request" in line
    proc = meshplan("evaluate", "--request", files["plan"], "--candidate", files["candidate"])
    assert "not a plan request" in one_error_line(proc)


def test_plan_or_request_where_a_candidate_is_expected(files: dict[str, str]) -> None:
    for given, found in ((files["plan"], "is a plan"), (files["request"], "is a plan request")):
        proc = meshplan("evaluate", "--request", files["request"], "--candidate", given)
        line = one_error_line(proc)
        assert found in line and "candidate" in line


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "model": {\n    "family": "gpt",,\n  }\n}\n')
    line = one_error_line(meshplan("plan", "--request", str(bad)))
    assert f"{bad}: malformed JSON at line 3 column 21" in line
    doc = json_error(meshplan("plan", "--request", str(bad), "--json"))
    assert (doc["error"], doc["line"], doc["column"]) == ("malformed JSON", 3, 21)


@pytest.mark.parametrize("kind", ["missing", "folder", "binary"])
def test_unreadable_input_file(tmp_path: Path, kind: str) -> None:
    path = {"missing": tmp_path / "none.json", "folder": tmp_path, "binary": tmp_path / "b.json"}[
        kind
    ]
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00{")
    line = one_error_line(meshplan("plan", "--request", str(path)))
    assert str(path) in line


def test_bootstrap_key_too_short_is_one_line_without_the_key() -> None:
    env = cli_env(MESHPLAN_BOOTSTRAP_ADMIN_KEY="hunter2")
    for args in (["serve"], ["db", "current"], ["keys", "create", "--tenant", "acme"]):
        line = one_error_line(meshplan(*args, env=env))
        assert "MESHPLAN_BOOTSTRAP_ADMIN_KEY" in line and "at least 16 characters" in line
        assert "hunter2" not in line
    doc = json_error(meshplan("serve", "--json", env=env))
    assert doc["error"] == "invalid setting"
    assert [s["variable"] for s in doc["settings"]] == ["MESHPLAN_BOOTSTRAP_ADMIN_KEY"]
    assert "hunter2" not in json.dumps(doc)


def test_every_invalid_setting_is_named() -> None:
    env = cli_env(MESHPLAN_SOLVER_WORKERS="0", MESHPLAN_MAX_BODY_BYTES="lots")
    doc = json_error(meshplan("serve", "--json", env=env))
    assert {s["variable"] for s in doc["settings"]} == {
        "MESHPLAN_SOLVER_WORKERS",
        "MESHPLAN_MAX_BODY_BYTES",
    }


# One user error per command; each must come back as JSON on stdout with --json.
JSON_ERRORS = {
    "bubble": ["bubble", "--pp", "4"],
    "bubble usage": ["bubble", "--pp", "four"],
    "evaluate": ["evaluate", "--request", "/nonexistent.json", "--candidate", "/none.json"],
    "plan": ["plan"],
    "launch": ["launch", "--target", "torchrun"],
    "launch usage": ["launch", "--target", "mainframe", "--plan-file", "p.json"],
    "profile": ["profile", "--model", "gpt:num_layers=2", "--seq-length", "8", "--tp", "x"],
    "profile-network": ["profile-network", "--nnodes", "2"],
    "serve": ["serve", "--workers", "none"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", JSON_ERRORS)
def test_json_errors_on_every_command(name: str) -> None:
    doc = json_error(meshplan(*JSON_ERRORS[name], "--json"))
    assert doc["error"]
    plain = meshplan(*JSON_ERRORS[name])
    assert plain.returncode == 2 and plain.stdout == "" and "Traceback" not in plain.stderr


def test_database_url_that_does_not_parse_or_open() -> None:
    line = one_error_line(meshplan("db", "current", env=cli_env(MESHPLAN_DATABASE_URL="foo")))
    assert line.startswith("error: MESHPLAN_DATABASE_URL: Could not parse")
    url = "postgresql+psycopg://postgres:secret-pw@127.0.0.1:1/none"
    proc = meshplan("db", "current", env=cli_env(MESHPLAN_DATABASE_URL=url))
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: cannot open the database: ") and "secret-pw" not in line
