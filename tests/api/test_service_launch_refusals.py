"""Launch refusals a user meets: a node layout other than the plan's cluster (422 naming both
shapes), and a plan the framework cannot express (a short 422: one line per kind of reason,
with its count and the constraint that fixes it)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from svc_factories import evaluated_result, tiny_request
from svc_harness import Api
from typer.testing import CliRunner

from api.cli import app
from api.store.db import session_scope
from api.store.plans import insert_plan

# 1,024 A100s as 128 nodes of 8: tp=2 x pp=2 x dp=256
BIG_REQUEST = tiny_request(
    cluster={"gpu": "A100-SXM-80GB", "num_gpus": 1024, "gpus_per_node": 8},
    training={"global_batch_size": 1024, "seq_length": 256},
)
BIG_CANDIDATE = {"tp": 2, "pp": 2, "dp": 256, "schedule": "1f1b", "micro_batch_size": 1}


def _store(api: Api, request: dict[str, Any], result: dict[str, Any]) -> str:
    with session_scope(api.app.state.meshplan.sessions) as session:
        row = insert_plan(
            session,
            tenant="acme",
            request_hash=f"{len(json.dumps(result)):064d}",
            request=request,
            result=result,
            tags=[],
        )
        return row.id


@pytest.fixture
def big_plan(api: Api) -> str:
    return _store(api, BIG_REQUEST, evaluated_result(BIG_REQUEST, BIG_CANDIDATE))


def _nproc(command: str) -> int:
    argv = shlex.split(command)
    return int(argv[argv.index("--nproc-per-node") + 1])


def test_nodes_that_do_not_match_the_cluster_are_422_naming_both(api: Api, big_plan: str) -> None:
    r = api.client.get(
        f"/v1/plans/{big_plan}/launch",
        params={"target": "slurm", "framework": "meshplan", "nodes": 2},
        headers=api.acme,
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    doc = r.json()
    assert doc["errors"][0]["field"] == "deployment.nodes" and doc["errors"][0]["value"] == 2
    # both shapes: the plan's 128 nodes x 8 GPUs and what 2 nodes would need (512 per node)
    assert "128 node(s) x 8 GPUs" in doc["detail"] and "512 GPUs per node" in doc["detail"]


def test_gpus_per_node_and_hosts_are_checked_too(api: Api, big_plan: str) -> None:
    url = f"/v1/plans/{big_plan}/launch"
    r = api.client.get(url, params={"gpus_per_node": 16}, headers=api.acme)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "deployment.gpus_per_node"
    assert "8 GPUs" in r.json()["detail"] and "64 nodes" in r.json()["detail"]
    r = api.client.post(url, json={"hosts": ["a", "b", "c", "d"]}, headers=api.acme)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "deployment.hosts"


def test_matching_or_absent_layout_launches_with_the_clusters_shape(
    api: Api, big_plan: str
) -> None:
    for params in ({"nodes": 128}, {"gpus_per_node": 8}, {}):
        r = api.client.get(f"/v1/plans/{big_plan}/launch", params=params, headers=api.acme)
        assert r.status_code == 200, (params, r.text)
        commands = r.json()["commands"]
        assert len(commands) == 128 and {_nproc(c) for c in commands} == {8}


def test_plan_stored_without_its_node_shape_uses_the_stored_request(api: Api) -> None:
    # a cluster of 4-GPU nodes, and a plan stored before plans recorded gpus_per_node
    request = {**BIG_REQUEST, "cluster": {**BIG_REQUEST["cluster"], "gpus_per_node": 4}}
    result = evaluated_result(request, BIG_CANDIDATE)
    del result["plan"]["gpus_per_node"]
    plan_id = _store(api, request, result)
    url = f"/v1/plans/{plan_id}/launch"
    r = api.client.get(url, params={"nodes": 128}, headers=api.acme)
    assert r.status_code == 422 and "256 node(s) x 4 GPUs" in r.json()["detail"]
    r = api.client.get(url, headers=api.acme)
    assert r.status_code == 200 and {_nproc(c) for c in r.json()["commands"]} == {4}


def test_cli_refuses_other_nodes_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(evaluated_result(BIG_REQUEST, BIG_CANDIDATE)))
    args = ["launch", "--plan-file", str(path), "--target", "torchrun", "--nodes", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "deployment.nodes=2" in lines[0] and "128 node(s)" in lines[0]
