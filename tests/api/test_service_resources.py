"""Resources around a stored plan: get, timeline, launch (JSON and tar.gz, unsupported ->
422), runs (measured vs predicted), profiles, evaluations, the bubble calculator."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
from svc_factories import evaluated_result, profile_doc, tiny_request
from svc_harness import Api

from api.store.db import session_scope
from api.store.plans import insert_plan
from planner.cost import check_candidate, evaluate
from planner.specs import Candidate, PlanRequest

CANDIDATE = {"tp": 1, "pp": 2, "dp": 2, "schedule": "gpipe", "micro_batch_size": 1}


@pytest.fixture
def plan_id(api: Api) -> str:
    req = tiny_request()
    with session_scope(api.app.state.meshplan.sessions) as session:
        row = insert_plan(
            session,
            tenant="acme",
            request_hash="h" * 64,
            request=req,
            result=evaluated_result(req, CANDIDATE),
            tags=["demo"],
        )
        return row.id


def test_get_plan(api: Api, plan_id: str) -> None:
    doc = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()
    assert doc["id"] == plan_id and doc["cache_hit"] is False and doc["tags"] == ["demo"]
    assert doc["result"]["plan"]["pp"] == 2
    assert doc["links"]["timeline_svg"] == f"/v1/plans/{plan_id}/timeline.svg"


def test_timeline_svg(api: Api, plan_id: str) -> None:
    r = api.client.get(f"/v1/plans/{plan_id}/timeline.svg", headers=api.acme)
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert r.text.lstrip().startswith("<svg") or "<svg" in r.text[:200]
    # gpipe, pp=2, m = 8 / (dp 2 * mbs 1) = 4: every forward of micro-batch 3 is drawn
    assert "F3" in r.text


def test_launch_json_and_archive(api: Api, plan_id: str) -> None:
    url = f"/v1/plans/{plan_id}/launch"
    r = api.client.get(
        url, params={"target": "torchrun", "framework": "meshplan", "nodes": 1}, headers=api.acme
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["files"] and doc["commands"]
    assert any("torchrun" in c for c in doc["commands"])
    names = {f["name"] for f in doc["files"]}
    for variant in ({"params": {"format": "tar.gz"}}, {"headers": {"Accept": "application/gzip"}}):
        r = api.client.get(
            url,
            params={**variant.get("params", {}), "nodes": 1},
            headers={**api.acme, **variant.get("headers", {})},
        )
        assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
        with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
            got = {m.name.split("/", 1)[1] for m in tar.getmembers()}
        assert got == names
    r = api.client.post(url, params={"target": "slurm"}, json={"nodes": 1}, headers=api.acme)
    assert r.status_code == 200, r.text
    assert any(f["name"].endswith(".sbatch") or "sbatch" in f["content"] for f in r.json()["files"])


def test_launch_unexpressible_plan_is_422(api: Api, plan_id: str) -> None:
    r = api.client.get(
        f"/v1/plans/{plan_id}/launch", params={"framework": "megatron"}, headers=api.acme
    )
    assert r.status_code == 422
    doc = r.json()
    assert doc["framework"] == "megatron" and doc["reasons"]
    # Megatron has no GPipe
    assert any(r["kind"] == "schedule" and "gpipe" in r["example"] for r in doc["reasons"])


def test_launch_bad_deployment_names_field(api: Api, plan_id: str) -> None:
    r = api.client.get(f"/v1/plans/{plan_id}/launch", params={"port": "99999"}, headers=api.acme)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "query.port"


def _report(doc: dict[str, Any], *, slower: float) -> dict[str, Any]:
    pred = doc["result"]["plan"]["prediction"]
    return {
        "device": "cpu",
        "backend": "gloo",
        "world_size": 4,
        "tp": 1,
        "pp": 2,
        "dp": 2,
        "schedule": "gpipe",
        "steps": 3,
        "warmup_steps": 1,
        "step_times_s": [pred["step_time_s"] * slower] * 3,
        "step_time_s": pred["step_time_s"] * slower,
        "bubble_fraction": 0.5,
        "stages": [
            {
                "stage": s["stage"],
                "rank": s["rank"],
                "busy_s": 0.001,
                "peak_memory_bytes": 2 * r["total_bytes"],
                "activation_bytes": s["activation_bytes"],
            }
            for s, r in zip(pred["stages"], pred["ranks"], strict=True)
        ],
    }


def test_runs_measured_against_predicted(api: Api, plan_id: str) -> None:
    doc = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme).json()
    r = api.client.post(
        f"/v1/plans/{plan_id}/runs", json=_report(doc, slower=2.0), headers=api.acme
    )
    assert r.status_code == 201, r.text
    cmp = r.json()["comparison"]
    # predicted = measured / 2 -> (predicted - measured) / measured = -0.5
    assert cmp["step_time_s"]["error"] == pytest.approx(-0.5)
    assert cmp["worst_memory_error"] == pytest.approx(0.5)  # measured twice the prediction
    assert all(s["activation_bytes"]["error"] == pytest.approx(0) for s in cmp["stages"])
    listed = api.client.get(f"/v1/plans/{plan_id}/runs", headers=api.acme).json()
    assert [x["id"] for x in listed["data"]] == [r.json()["id"]]
    assert (
        api.client.post(
            f"/v1/plans/{plan_id}/runs", json=_report(doc, slower=1.0), headers=api.globex
        ).status_code
        == 404
    )


def test_profiles_and_evaluation_by_profile_id(api: Api) -> None:
    req = tiny_request()
    profile = profile_doc(req)
    r = api.client.post("/v1/profiles", json=profile, headers=api.acme)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    assert api.client.get(f"/v1/profiles/{pid}", headers=api.acme).json()["profile"] == profile
    assert api.client.get(f"/v1/profiles/{pid}", headers=api.globex).status_code == 404
    listed = api.client.get("/v1/profiles", headers=api.acme).json()["data"]
    assert [p["id"] for p in listed] == [pid]
    cand = {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"}
    by_id = {**req, "model": {"profile_id": pid}}
    r = api.client.post(
        "/v1/evaluations", json={"request": by_id, "candidate": cand}, headers=api.acme
    )
    assert r.status_code == 200, r.text
    inline = PlanRequest.model_validate({**req, "model": {"profile": profile}})
    want = evaluate(inline, check_candidate(inline, Candidate.model_validate(cand)))
    assert r.json()["prediction"]["step_time_s"] == pytest.approx(want.step_time_s)
    r = api.client.post(
        "/v1/evaluations", json={"request": by_id, "candidate": cand}, headers=api.globex
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "body.model.profile_id"


def test_evaluation_of_a_bad_candidate_names_the_field(api: Api) -> None:
    cand = {"tp": 3, "pp": 1, "dp": 1}
    r = api.client.post(
        "/v1/evaluations", json={"request": tiny_request(), "candidate": cand}, headers=api.acme
    )
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")


def test_bubble(api: Api) -> None:
    p, m = 4, 8
    r = api.client.post(
        "/v1/bubble",
        json={"schedule": "1f1b", "pp": p, "num_microbatches": m, "fw_s": [1.0], "bw_s": [2.0]},
        headers=api.acme,
    )
    assert r.status_code == 200, r.text
    assert r.json()["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))
    r = api.client.post(
        "/v1/bubble",
        json={
            "schedule": "1f1b",
            "pp": 1024,
            "num_microbatches": 16384,
            "fw_s": [1.0],
            "bw_s": [2.0],
        },
        headers=api.acme,
    )
    assert r.status_code == 422
