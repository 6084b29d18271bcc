"""Errors are RFC 9457 problem documents: 401, 403, 404, 405, 413, 422 (field path and value)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
from svc_harness import Api

PROBLEM = "application/problem+json"


def _is_problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    doc: dict[str, Any] = r.json()
    assert doc["status"] == status and doc["title"] and "type" in doc
    assert "Traceback" not in r.text
    return doc


def test_missing_and_unknown_keys_are_401(api: Api) -> None:
    doc = _is_problem(api.client.get("/v1/plans"), 401)
    assert "API key" in doc["detail"]
    _is_problem(api.client.get("/v1/plans", headers={"Authorization": "Bearer nope"}), 401)
    _is_problem(api.client.get("/v1/plans", headers={"Authorization": "Basic abc"}), 401)
    assert api.client.get("/v1/plans").headers["www-authenticate"] == "Bearer"


def test_only_admins_create_keys(api: Api) -> None:
    r = api.client.post("/v1/keys", json={"tenant": "x"}, headers=api.acme)
    _is_problem(r, 403)
    r = api.client.post("/v1/keys", json={"tenant": "acme"}, headers=api.admin)
    assert r.status_code == 201 and r.json()["key"].startswith("mp_")
    new = {"Authorization": f"Bearer {r.json()['key']}"}
    assert api.client.get("/v1/plans", headers=new).status_code == 200


def test_unknown_plan_is_404(api: Api) -> None:
    doc = _is_problem(api.client.get("/v1/plans/doesnotexist", headers=api.acme), 404)
    assert doc["instance"] == "/v1/plans/doesnotexist"
    _is_problem(api.client.get("/v1/nowhere", headers=api.acme), 404)


def test_validation_names_field_and_value(api: Api) -> None:
    body = {
        "model": {
            "family": "gpt",
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1024,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": -3},
        "training": {"global_batch_size": 8, "seq_length": 256},
    }
    doc = _is_problem(api.client.post("/v1/plans", json=body, headers=api.acme), 422)
    fields = {e["field"]: e for e in doc["errors"]}
    assert "body.cluster.num_gpus" in fields
    assert fields["body.cluster.num_gpus"]["value"] == -3
    doc = _is_problem(api.client.get("/v1/plans?page_size=0", headers=api.acme), 422)
    assert doc["errors"][0]["field"] == "query.page_size"
    doc = _is_problem(
        api.client.post(
            "/v1/plans",
            content=b"{not json",
            headers={**api.acme, "content-type": "application/json"},
        ),
        400,  # malformed JSON is a bad request, not a field that failed validation
    )


def test_unknown_profile_id_is_422_naming_it(api: Api) -> None:
    body = {
        "model": {"profile_id": "nope"},
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 4},
        "training": {"global_batch_size": 8, "seq_length": 256},
    }
    doc = _is_problem(api.client.post("/v1/plans", json=body, headers=api.acme), 422)
    assert doc["errors"][0]["field"] == "body.model.profile_id"
    assert doc["errors"][0]["value"] == "nope"


def test_bodies_over_the_limit_are_413(api: Api) -> None:
    limit = api.app.state.meshplan.settings.max_body_bytes
    big = b'{"x": "' + b"a" * limit + b'"}'
    doc = _is_problem(
        api.client.post(
            "/v1/plans", content=big, headers={**api.acme, "content-type": "application/json"}
        ),
        413,
    )
    assert doc["max_bytes"] == limit

    def chunks() -> Iterator[bytes]:  # no Content-Length: the middleware counts bytes
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536

    r = api.client.post(
        "/v1/profiles", content=chunks(), headers={**api.acme, "content-type": "application/json"}
    )
    _is_problem(r, 413)


def test_wrong_method_is_a_problem(api: Api) -> None:
    _is_problem(api.client.delete("/v1/plans", headers=api.acme), 405)


def test_health_and_metrics(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    assert api.client.get("/readyz").json() == {"status": "ready"}
    api.client.get("/v1/plans", headers=api.acme)
    text = api.client.get("/metrics").text
    assert 'meshplan_http_request_duration_seconds_count{method="GET",route="/v1/plans"' in text
    assert "meshplan_searches_total" in text
