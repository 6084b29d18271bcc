"""Deployment files: manifests load and name what they must; scripts parse; the CLI's db and
keys commands work against a database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def test_kubernetes_manifests() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "meshplan.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"Deployment", "Service"}
    container = kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"] for e in container["env"]}
    assert {"MESHPLAN_DATABASE_URL", "MESHPLAN_BOOTSTRAP_ADMIN_KEY"} <= env
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert (
        kinds["Service"]["spec"]["selector"]
        == kinds["Deployment"]["spec"]["selector"]["matchLabels"]
    )


def test_compose_has_postgres_and_service() -> None:
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert doc["services"]["db"]["image"].startswith("postgres")
    env = doc["services"]["meshplan"]["environment"]
    assert env["MESHPLAN_DATABASE_URL"].startswith("postgresql+psycopg://")


def test_scripts_parse_and_unit_runs_the_cli() -> None:
    subprocess.run(["bash", "-n", str(DEPLOY / "slurm" / "plan_and_submit.sh")], check=True)
    unit = (DEPLOY / "systemd" / "meshplan.service").read_text()
    assert "meshplan serve" in unit and "meshplan db upgrade" in unit
    assert 'CMD ["meshplan", "serve"' in (DEPLOY / "Dockerfile").read_text()


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
