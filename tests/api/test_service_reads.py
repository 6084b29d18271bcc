"""The hot reads (GET of one plan, the history page) serve what was stored, on SQLite and
PostgreSQL: they read columns with SQLAlchemy Core, bind values into statements built once per
shape of the query, skip re-validating stored documents and encode with orjson, so these tests
hold their output against the rows as inserted, the response models and the standard library's
JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fastapi.responses import JSONResponse
from svc_factories import evaluated_result, synthetic_rows, tiny_request
from svc_harness import Api

from api.jsonbody import JSONBody
from api.schemas.plans import PlanListPublic, PlanPublic
from api.store.db import session_scope
from api.store.plans import bulk_insert, insert_plan
from planner.cost.version import COST_MODEL_VERSION

SUMMARY_FIELDS = (
    "model_name",
    "model_hash",
    "gpu",
    "num_gpus",
    "schedule",
    "tp",
    "pp",
    "dp",
    "vpp",
    "micro_batch_size",
    "step_time_s",
    "tokens_per_s",
    "bubble_fraction",
    "peak_memory_bytes",
    "tags",
    "calibration_id",
)


def _rows(api: Api, n: int = 60) -> list[dict[str, Any]]:
    """`n` synthetic plans: a third stored before versions were recorded, a third under
    today's version with the catalog defaults, a third with a calibration."""
    rows = synthetic_rows(n, tenant="acme", seed=7)
    for i, r in enumerate(rows):
        r["cost_model_version"] = None if i % 3 == 0 else COST_MODEL_VERSION
        r["calibration_id"] = "cal-7" if i % 3 == 2 else None
    with session_scope(api.app.state.meshplan.sessions) as session:
        bulk_insert(session, rows=rows)
    return rows


def _ids(api: Api, **params: Any) -> set[str]:
    out: set[str] = set()
    token = None
    while True:
        q = {**params, "page_size": 17, **({"page_token": token} if token else {})}
        r = api.client.get("/v1/plans", params=q, headers=api.acme)
        assert r.status_code == 200, r.text
        out |= {p["id"] for p in r.json()["data"]}
        token = r.json()["next_page_token"]
        if token is None:
            return out


def test_history_rows_are_the_stored_columns(api: Api) -> None:
    rows = {r["id"]: r for r in _rows(api)}
    r = api.client.get("/v1/plans", params={"page_size": 200}, headers=api.acme)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    page = r.json()
    assert PlanListPublic.model_validate(page).model_dump(mode="json")["data"] == page["data"]
    assert {p["id"] for p in page["data"]} == set(rows)
    for served in page["data"]:
        stored = rows[served["id"]]
        for name in SUMMARY_FIELDS:
            assert served[name] == stored[name], name
        assert datetime.fromisoformat(served["created_at"]) == stored["created_at"]
        assert served["cost_model_version"] == (stored["cost_model_version"] or "unknown")


def test_one_shape_of_query_binds_each_requests_values(api: Api) -> None:
    """The same filters with other values (the statement is reused) and a filter's special
    value beside an ordinary one (two statements) each select what a scan of the rows does."""
    rows = _rows(api)
    for gpu in ("H100-SXM-80GB", "A100-SXM-80GB", "H200-SXM-141GB"):
        for low in (16, 64):
            want = {r["id"] for r in rows if r["gpu"] == gpu and r["num_gpus"] >= low}
            assert want and _ids(api, gpu=gpu, min_gpus=low) == want
    unknown = {r["id"] for r in rows if r["cost_model_version"] is None}
    today = {r["id"] for r in rows if r["cost_model_version"] == COST_MODEL_VERSION}
    assert _ids(api, cost_model_version="unknown") == unknown
    assert _ids(api, cost_model_version=COST_MODEL_VERSION) == today
    assert _ids(api, cost_model_version="1999.01.1") == set()
    defaults = {r["id"] for r in rows if r["cost_model_version"] and not r["calibration_id"]}
    assert _ids(api, calibration_id="none") == defaults
    assert _ids(api, calibration_id="cal-7") == {r["id"] for r in rows if r["calibration_id"]}


def test_one_plan_is_served_as_stored(api: Api) -> None:
    request = tiny_request()
    result = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    with session_scope(api.app.state.meshplan.sessions) as session:
        row = insert_plan(
            session, tenant="acme", request_hash="s" * 64, request=request, result=result, tags=[]
        )
        plan_id, created = row.id, row.created_at
    r = api.client.get(f"/v1/plans/{plan_id}", headers=api.acme)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["request"] == request and doc["result"] == result
    assert datetime.fromisoformat(doc["created_at"]) == created
    assert doc["submissions"] == [] and doc["cache_hit"] is False
    assert doc["cost_model_version"] == COST_MODEL_VERSION and doc["calibration_id"] is None
    # what is served without validation is a valid PlanPublic
    assert PlanPublic.model_validate(doc).model_dump(mode="json")["result"] == result
    r = api.client.get(f"/v1/plans/{plan_id}", headers=api.globex)
    assert r.status_code == 404


def test_json_bodies_are_the_standard_librarys_json_values() -> None:
    request = tiny_request()
    result = evaluated_result(request, {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    doc = {"request": request, "result": result, "name": "gpt-é→", "tiny": 5e-324, "big": 2**63 - 1}
    body = JSONBody(doc).body
    assert json.loads(body) == json.loads(JSONResponse(doc).body) == doc
    assert "gpt-é→".encode() in body  # UTF-8, not escaped
    # values orjson refuses are written as the standard library writes them
    assert json.loads(JSONBody({"n": 2**70}).body) == {"n": 2**70}
    assert JSONBody({1: "x"}).body == JSONResponse({1: "x"}).body == b'{"1":"x"}'
