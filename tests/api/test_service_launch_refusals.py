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


# 16 decoder blocks on 8 GPUs: pp=4 x vpp=2 stages of 2 blocks, each stage's first block
# selective and its second none: Megatron has no such recompute (1 model-wide reason and one
# per stage), and nothing else stops it
MIXED_REQUEST = tiny_request(
    model={**tiny_request()["model"], "num_layers": 16},
    cluster={"gpu": "A100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8},
    training={"global_batch_size": 16, "seq_length": 256},
)
_STAGES = [
    {
        "layers": [0 if s == 0 else 1 + 2 * s, 1 + 2 * s + 2 + (1 if s == 7 else 0)],
        "recompute": ["none"] * (s == 0) + ["selective", "none"] + ["none"] * (s == 7),
    }
    for s in range(8)
]
MIXED_CANDIDATE = {
    "tp": 1,
    "pp": 4,
    "dp": 2,
    "vpp": 2,
    "schedule": "interleaved-1f1b",
    "micro_batch_size": 1,
    "stages": _STAGES,
}


def test_unexpressible_plan_is_a_short_422_by_kind(api: Api) -> None:
    plan_id = _store(api, MIXED_REQUEST, evaluated_result(MIXED_REQUEST, MIXED_CANDIDATE))
    r = api.client.get(
        f"/v1/plans/{plan_id}/launch",
        params={"target": "slurm", "framework": "megatron"},
        headers=api.acme,
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    doc = r.json()
    assert len(r.content) < 1500, len(r.content)
    assert doc["type"].endswith("/unsupported-plan") and doc["framework"] == "megatron"
    ((line,),) = [[x for x in doc["reasons"] if x["kind"] == "recompute"]]
    assert line["count"] == 1 + 8  # the model-wide reason and one per stage
    assert [x["kind"] for x in doc["reasons"]] == ["recompute"]
    assert "uniform_recompute" in line["fix"] and "selective" in line["example"]
    assert doc["fix"] == {"constraints": {"framework": "megatron"}}
    assert "9 reason(s)" in doc["detail"] and 'constraints.framework: "megatron"' in doc["detail"]


def test_several_kinds_each_get_one_line_and_their_fix(api: Api) -> None:
    # DeepSpeed: an interleaved schedule, and per-layer recompute with 'selective'
    plan_id = _store(api, MIXED_REQUEST, evaluated_result(MIXED_REQUEST, MIXED_CANDIDATE))
    r = api.client.get(
        f"/v1/plans/{plan_id}/launch", params={"framework": "deepspeed"}, headers=api.acme
    )
    assert r.status_code == 422
    by_kind = {x["kind"]: x for x in r.json()["reasons"]}
    assert len(by_kind) == len(r.json()["reasons"])  # one line per kind
    assert by_kind["schedule"]["fix"] == 'constraints.schedules: ["1f1b"], constraints.vpp: [1]'
    assert '"none", "full"' in by_kind["recompute"]["fix"]  # DeepSpeed has no selective


def test_the_fix_gives_a_plan_the_framework_launches(api: Api) -> None:
    body = {**MIXED_REQUEST, "constraints": {"framework": "megatron", "pp": [4]}}
    r = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert r.status_code in (200, 201), r.text
    plan_id = r.json()["id"]
    r = api.client.get(
        f"/v1/plans/{plan_id}/launch",
        params={"target": "slurm", "framework": "megatron"},
        headers=api.acme,
    )
    assert r.status_code == 200, r.text
    assert any("--pipeline-model-parallel-size 4" in f["content"] for f in r.json()["files"])


def test_cli_prints_the_summary_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(evaluated_result(MIXED_REQUEST, MIXED_CANDIDATE)))
    args = ["launch", "--plan-file", str(path), "--target", "slurm", "--framework", "megatron"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "recompute x9" in lines[0] and len(lines[0]) < 1000
