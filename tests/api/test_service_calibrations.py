"""/v1/calibrations: fit from inline observations or stored runs (201, then 200 for the same
document), read and list per tenant, refusals as problem+json, and plan/evaluation requests
that name a stored calibration by id."""

from __future__ import annotations

from typing import Any

import pytest
from svc_factories import evaluated_result, tiny_request
from svc_harness import Api

from api.store.db import session_scope
from api.store.plans import insert_plan
from planner.catalog.efficiency import DEFAULT_EFFICIENCY
from planner.cost import evaluate
from planner.specs import Candidate, PlanRequest

CANDIDATES: tuple[dict[str, Any], ...] = (
    {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b", "micro_batch_size": 1},
    {"tp": 2, "pp": 2, "dp": 1, "schedule": "gpipe", "micro_batch_size": 2},
    {"tp": 4, "pp": 1, "dp": 1, "schedule": "1f1b", "micro_batch_size": 1},
    {"tp": 1, "pp": 1, "dp": 4, "schedule": "1f1b", "micro_batch_size": 2},
)
TRUTH = DEFAULT_EFFICIENCY.replace(matmul_fraction=0.4, link_fraction=0.5)


def _measured(candidate: dict[str, Any]) -> float:
    request = PlanRequest.model_validate(tiny_request())
    return evaluate(request, Candidate.model_validate(candidate), efficiency=TRUTH).step_time_s


def _observations() -> list[dict[str, Any]]:
    return [
        {
            "request": tiny_request(),
            "candidate": c,
            "measured": {"step_time_s": _measured(c)},
            "source": f"run {i}",
        }
        for i, c in enumerate(CANDIDATES)
    ]


def test_fit_store_read_list_and_plan_with_it(api: Api) -> None:
    r = api.client.post(
        "/v1/calibrations",
        json={"observations": _observations(), "scope": {"framework": "test"}},
        headers=api.acme,
    )
    assert r.status_code == 201, r.text
    doc = r.json()
    cid = doc["id"]
    assert r.headers["location"] == f"/v1/calibrations/{cid}"
    assert doc["constants"]["matmul_fraction"] == pytest.approx(0.4, rel=1e-3)
    assert doc["constants"]["link_fraction"] == pytest.approx(0.5, rel=1e-3)
    assert doc["scope"] == {"framework": "test"}
    again = api.client.post(
        "/v1/calibrations",
        json={"observations": _observations(), "scope": {"framework": "test"}},
        headers=api.acme,
    )
    assert again.status_code == 200 and again.json()["id"] == cid
    assert api.client.get(f"/v1/calibrations/{cid}", headers=api.acme).json()["id"] == cid
    assert api.client.get(f"/v1/calibrations/{cid}", headers=api.globex).status_code == 404
    listed = api.client.get("/v1/calibrations", headers=api.acme).json()
    assert [c["id"] for c in listed["data"]] == [cid]
    assert "observations" not in listed["data"][0]
    assert listed["data"][0]["num_observations"] == len(CANDIDATES)

    ev = api.client.post(
        "/v1/evaluations",
        json={
            "request": {**tiny_request(), "calibration": {"id": cid}},
            "candidate": CANDIDATES[0],
        },
        headers=api.acme,
    )
    assert ev.status_code == 200, ev.text
    step = ev.json()["prediction"]["step_time_s"]
    assert step == pytest.approx(_measured(CANDIDATES[0]), rel=1e-3)
    plan = api.client.post(
        "/v1/plans?wait=true", json={**tiny_request(), "calibration": {"id": cid}}, headers=api.acme
    )
    assert plan.status_code in (200, 201), plan.text
    assert plan.json()["result"]["plan"]["calibration_id"] == cid


def test_unknown_or_other_tenants_calibration_is_422(api: Api) -> None:
    r = api.client.post(
        "/v1/evaluations",
        json={
            "request": {**tiny_request(), "calibration": {"id": "cal-x"}},
            "candidate": CANDIDATES[0],
        },
        headers=api.acme,
    )
    assert r.status_code == 422
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["errors"][0]["field"] == "body.calibration.id"


def test_undetermined_constant_is_422_naming_fit(api: Api) -> None:
    r = api.client.post(
        "/v1/calibrations", json={"observations": _observations()[:1]}, headers=api.acme
    )
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "body.fit"
    assert "not determined" in r.json()["detail"]


def test_bad_bodies_are_422(api: Api) -> None:
    both = api.client.post(
        "/v1/calibrations",
        json={"observations": _observations(), "run_ids": ["x"]},
        headers=api.acme,
    )
    assert both.status_code == 422
    bad_fit = api.client.post(
        "/v1/calibrations",
        json={"observations": _observations(), "fit": ["speed"]},
        headers=api.acme,
    )
    assert bad_fit.status_code == 422
    wrong = _observations()
    wrong[0]["candidate"] = {"tp": 2, "pp": 1, "dp": 1}
    r = api.client.post("/v1/calibrations", json={"observations": wrong}, headers=api.acme)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "body.observations[0].candidate.tp*pp*dp"
    unknown = api.client.post("/v1/calibrations", json={"run_ids": ["nope"]}, headers=api.acme)
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["field"] == "body.run_ids[0]"


def test_fit_from_stored_runs(api: Api) -> None:
    run_ids = []
    for cand in CANDIDATES:
        req = tiny_request()
        result = evaluated_result(req, cand)
        with session_scope(api.app.state.meshplan.sessions) as session:
            plan_id = insert_plan(
                session, tenant="acme", request_hash="h" * 64, request=req, result=result, tags=[]
            ).id
        pred = result["plan"]["prediction"]
        measured = _measured(cand)
        report = {
            "device": "cuda",
            "backend": "nccl",
            "world_size": 4,
            "tp": cand["tp"],
            "pp": cand["pp"],
            "dp": cand["dp"],
            "schedule": cand["schedule"],
            "steps": 3,
            "warmup_steps": 1,
            "step_times_s": [measured] * 3,
            "step_time_s": measured,
            "bubble_fraction": pred["bubble_fraction"],
            "stages": [
                {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.001, "peak_memory_bytes": 1e9}
                for s in pred["stages"]
            ],
        }
        r = api.client.post(f"/v1/plans/{plan_id}/runs", json=report, headers=api.acme)
        assert r.status_code == 201, r.text
        run_ids.append(r.json()["id"])
    r = api.client.post("/v1/calibrations", json={"run_ids": run_ids}, headers=api.acme)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["constants"]["matmul_fraction"] == pytest.approx(0.4, rel=1e-3)
    assert all(o["measured"]["peak_memory_gib"] > 0 for o in doc["observations"])
    assert (
        api.client.post(
            "/v1/calibrations", json={"run_ids": run_ids}, headers=api.globex
        ).status_code
        == 422
    )


def _store_runs(api: Api) -> tuple[list[str], list[str], list[float]]:
    """One stored plan per candidate, each with a run measured at TRUTH's step time:
    (plan ids, run ids, each plan's stored predicted step time)."""
    plan_ids, run_ids, predicted = [], [], []
    for cand in CANDIDATES:
        req = tiny_request()
        result = evaluated_result(req, cand)
        with session_scope(api.app.state.meshplan.sessions) as session:
            plan_ids.append(
                insert_plan(
                    session,
                    tenant="acme",
                    request_hash="h" * 64,
                    request=req,
                    result=result,
                    tags=[],
                ).id
            )
        pred = result["plan"]["prediction"]
        predicted.append(pred["step_time_s"])
        measured = _measured(cand)
        report = {
            "device": "cuda", "backend": "nccl", "world_size": 4, "tp": cand["tp"],
            "pp": cand["pp"], "dp": cand["dp"], "schedule": cand["schedule"], "steps": 3,
            "warmup_steps": 1, "step_times_s": [measured] * 3, "step_time_s": measured,
            "bubble_fraction": pred["bubble_fraction"],
            "stages": [
                {"stage": s["stage"], "rank": s["rank"], "busy_s": 0.001, "peak_memory_bytes": 1e9}
                for s in pred["stages"]
            ],
        }  # fmt: skip
        r = api.client.post(f"/v1/plans/{plan_ids[-1]}/runs", json=report, headers=api.acme)
        assert r.status_code == 201, r.text
        run_ids.append(r.json()["id"])
    return plan_ids, run_ids, predicted


def test_the_loop_folds_plans_runs_and_the_page_shows_before_and_after(api: Api) -> None:
    plan_ids, run_ids, predicted = _store_runs(api)
    key = api.acme["Authorization"].removeprefix("Bearer ")
    page = api.client.get(f"/plans/{plan_ids[0]}", params={"key": key})
    assert page.status_code == 200
    measured = _measured(CANDIDATES[0])
    before = f"{predicted[0] / measured - 1:+.1%}"
    assert before in page.text and "none yet" in page.text
    assert 'id="cost-model-version"' in page.text

    r = api.client.post("/v1/calibrations", json={"plan_ids": plan_ids}, headers=api.acme)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert [o["run_id"] for o in doc["observations"]] == run_ids  # every plan's run, in order
    assert doc["constants"]["matmul_fraction"] == pytest.approx(0.4, rel=1e-3)
    page = api.client.get(f"/plans/{plan_ids[0]}", params={"key": key})
    assert doc["id"] in page.text
    table = page.text[page.text.index('id="predicted-vs-measured"') :]
    row = table[table.index(run_ids[0]) :].split("</tr>")[0]
    assert before in row and "+0.0%" in row  # the calibration predicts what was measured

    # the same runs named by id, or through a plan and the run ids together: the same fit
    again = api.client.post(
        "/v1/calibrations", json={"plan_ids": plan_ids[:1], "run_ids": run_ids}, headers=api.acme
    )
    assert again.status_code == 200 and again.json()["id"] == doc["id"]
    unknown = api.client.post("/v1/calibrations", json={"plan_ids": ["nope"]}, headers=api.acme)
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["field"] == "body.plan_ids[0]"
    sub = api.client.post("/v1/calibrations", json={"submission_ids": ["nope"]}, headers=api.acme)
    assert sub.status_code == 422
    assert sub.json()["errors"][0]["field"] == "body.submission_ids[0]"
