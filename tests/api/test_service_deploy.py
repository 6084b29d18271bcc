"""Deployment files, checked against the code they deploy (no docker or cluster here): the
compose file and manifests parse; every command they run is a `meshplan` command whose
`--help` lists the options they pass, in a process where torch cannot be imported (the image
has none); their probes' and healthchecks' paths are routes of the app; their MESHPLAN_*
variables are settings; Secret references, selectors and the HPA's target resolve. The CLI's
db and keys commands run against a database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url
from svc_harness import make_settings

from api.app import create_app
from api.cli import LAZY_COMMANDS
from api.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
WORKER_MISSING = "worker" not in LAZY_COMMANDS


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def _manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _manifests() if d["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _by_kind(kind) if d["metadata"]["name"] == name]
    return doc


def _pod(doc: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = doc["spec"]["template"]["spec"]
    return pod


def _systemd_commands() -> list[list[str]]:
    out = []
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        for line in unit.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")):
                argv = line.split("=", 1)[1].split()
                out.append(["meshplan", *argv[1:]])
    return out


def _dockerfile_cmd() -> list[str]:
    match = re.search(r"^CMD (\[.*\])$", (DEPLOY / "Dockerfile").read_text(), re.M)
    assert match, "the Dockerfile has no exec-form CMD"
    argv: list[str] = json.loads(match.group(1))
    return argv


def all_commands() -> list[list[str]]:
    """Every `meshplan ...` command line the deployment files run."""
    cmds = [s["command"] for s in _compose()["services"].values() if "command" in s]
    for doc in _by_kind("Deployment") + _by_kind("Job"):
        for c in _pod(doc)["containers"]:
            cmds.append(c["args"])
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if "exec" in c.get(probe, {}):
                    cmds.append(c[probe]["exec"]["command"])
    cmds += _systemd_commands()
    cmds.append(_dockerfile_cmd())
    return [c for c in cmds if c and c[0] == "meshplan"]


def _split(argv: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """('db', 'upgrade'), ['--json'] for `meshplan db upgrade --json`."""
    words = argv[1:]
    n = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    return tuple(words[:n]), [w.split("=")[0] for w in words[n:] if w.startswith("--")]


_HELP_SCRIPT = """
import json, sys
sys.modules["torch"] = None  # the image has no torch: importing it must not be needed
from typer.testing import CliRunner
from api.cli import app
out = {}
for path in json.loads(sys.argv[1]):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    out[" ".join(path)] = {"code": r.exit_code, "text": r.output}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, dict[str, Any]]:
    paths = sorted({_split(c)[0] for c in all_commands()})
    if WORKER_MISSING:
        paths = [p for p in paths if p[:1] != ("worker",)]
    proc = subprocess.run(
        [sys.executable, "-c", _HELP_SCRIPT, json.dumps(paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("MESHPLAN_")},
        check=True,
    )
    doc: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return doc


class Routes:
    """`path in routes`: a GET of `path` on a started app (SQLite) answers 200."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def __contains__(self, path: object) -> bool:
        return self.client.get(str(path)).status_code == 200


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routes]:
    app = create_app(make_settings(f"sqlite:///{tmp_path_factory.mktemp('d') / 'r.db'}"))
    with TestClient(app) as client:
        yield Routes(client)


def _check(argv: list[str], helps: dict[str, dict[str, Any]]) -> None:
    path, options = _split(argv)
    shown = helps[" ".join(path)]
    assert shown["code"] == 0, (argv, shown["text"])
    for option in options:
        assert option in shown["text"], f"{' '.join(argv)}: {option} is not an option"


def test_every_command_exists_without_torch(helps: dict[str, dict[str, Any]]) -> None:
    cmds = all_commands()
    assert len(cmds) >= 8
    for argv in cmds:
        if WORKER_MISSING and argv[1] == "worker":
            continue
        _check(argv, helps)


@pytest.mark.skipif(WORKER_MISSING, reason="`meshplan worker` is not in this tree yet (w22q)")
def test_worker_command_exists(helps: dict[str, dict[str, Any]]) -> None:
    workers = [c for c in all_commands() if c[1] == "worker"]
    assert len(workers) == 3  # compose, kubernetes, systemd
    for argv in workers:
        _check(argv, helps)


def _env_names() -> Iterator[str]:
    for service in _compose()["services"].values():
        env = service.get("environment", {})
        yield from (k for k in env if k.startswith("MESHPLAN_"))
    for doc in _by_kind("Deployment") + _by_kind("Job"):
        for c in _pod(doc)["containers"]:
            yield from (e["name"] for e in c.get("env", []))
    for unit in (DEPLOY / "systemd").glob("*.service"):
        yield from re.findall(r"^Environment=(MESHPLAN_\w+)=", unit.read_text(), re.M)
    yield from re.findall(r"^ENV (MESHPLAN_\w+)=", (DEPLOY / "Dockerfile").read_text(), re.M)


def test_every_variable_is_a_setting() -> None:
    names = set(_env_names())
    assert {"MESHPLAN_DATABASE_URL", "MESHPLAN_BOOTSTRAP_ADMIN_KEY"} <= names
    settings = {"MESHPLAN_" + f.upper() for f in Settings.model_fields}
    assert names <= settings, names - settings


def test_compose_tiers(routes: Routes) -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "migrate", "api", "worker"}
    assert services["db"]["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert services["migrate"]["command"][:3] == ["meshplan", "db", "upgrade"]
    assert services["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    for tier in ("api", "worker"):
        s = services[tier]
        assert s["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert s["environment"]["MESHPLAN_MIGRATE_ON_START"] == "false"
        url = make_url(s["environment"]["MESHPLAN_DATABASE_URL"])
        assert url.drivername == "postgresql+psycopg" and url.host == "db"
        assert (
            ROOT / s["build"]["context"].replace("..", ".") / s["build"]["dockerfile"]
        ).is_file()
    check = " ".join(services["api"]["healthcheck"]["test"])
    paths = re.findall(r"http://127\.0\.0\.1:8000(/\w+)", check)
    assert paths and all(p in routes for p in paths)
    assert services["api"]["ports"] == ["8000:8000"]


def test_kubernetes_manifests(routes: Routes) -> None:
    kinds = sorted(d["kind"] for d in _manifests())
    assert kinds == sorted(
        ["Secret", "Job", "Deployment", "Deployment", "Service", "HorizontalPodAutoscaler"]
    )
    api, worker = _named("Deployment", "meshplan-api"), _named("Deployment", "meshplan-worker")
    (box,) = _pod(api)["containers"]
    assert box["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert box["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"] for p in box["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert box[probe]["httpGet"]["path"] in routes
        assert box[probe]["httpGet"]["port"] in ports
    (service,) = _by_kind("Service")
    assert service["spec"]["selector"] == api["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] != worker["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] in ports
    for doc in (api, worker):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (hpa,) = _by_kind("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "meshplan-worker")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    (job,) = _by_kind("Job")
    assert _pod(job)["containers"][0]["args"][:3] == ["meshplan", "db", "upgrade"]
    assert _pod(job)["restartPolicy"] in {"OnFailure", "Never"}


def test_secret_references_resolve() -> None:
    (secret,) = _by_kind("Secret")
    keys = set(secret["stringData"])
    refs = []
    for doc in _by_kind("Deployment") + _by_kind("Job"):
        for c in _pod(doc)["containers"]:
            refs += [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e]
    assert {r["name"] for r in refs} == {secret["metadata"]["name"]}
    assert {r["key"] for r in refs} == keys == {"database-url", "bootstrap-admin-key"}
    assert make_url(secret["stringData"]["database-url"]).drivername == "postgresql+psycopg"


def test_dockerfile_builds_what_exists_without_torch(routes: Routes) -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert (ROOT / src).exists(), src
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if re.match(r"torch\b", d)]
    assert "[profiler" not in text and "torch" not in re.sub(r"#.*", "", text)
    paths = re.findall(r"http://127\.0\.0\.1:8000(/\w+)", text)
    assert paths and all(p in routes for p in paths)


def test_systemd_units_migrate_then_serve() -> None:
    unit = (DEPLOY / "systemd" / "meshplan.service").read_text()
    assert "ExecStartPre=/opt/meshplan/venv/bin/meshplan db upgrade" in unit
    assert "meshplan serve" in unit
    assert "meshplan worker" in (DEPLOY / "systemd" / "meshplan-worker.service").read_text()


def test_scripts_parse() -> None:
    subprocess.run(["bash", "-n", str(DEPLOY / "slurm" / "plan_and_submit.sh")], check=True)


def _cli(args: list[str], url: str) -> dict[str, object]:
    env = {**os.environ, "MESHPLAN_DATABASE_URL": url}
    out = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def test_cli_db_and_keys(db_url: str) -> None:
    assert _cli(["db", "current", "--json"], db_url)["revision"] is None
    assert _cli(["db", "upgrade", "--json"], db_url)["revision"] is not None
    key = _cli(["keys", "create", "--tenant", "ops", "--admin", "--json"], db_url)
    assert key["tenant"] == "ops" and key["admin"] is True
    assert str(key["key"]).startswith("mp_")
    assert _cli(["db", "downgrade", "--json"], db_url)["revision"] is None


def test_images_are_this_version() -> None:
    """Every meshplan image the files name is tagged with the version pyproject.toml builds."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = [s["image"] for s in _compose()["services"].values() if "build" in s]
    for doc in _by_kind("Deployment") + _by_kind("Job"):
        images += [c["image"] for c in _pod(doc)["containers"]]
    assert len(images) == 6
    assert {image.rsplit(":", 1)[1] for image in images} == {version}
