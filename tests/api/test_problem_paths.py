"""Problems name what the user wrote: the field path in their JSON (not pydantic's union tags),
the line and column of malformed JSON; and an error is mapped the same way whether the client
waits for the search or polls its job."""

from __future__ import annotations

import time
from typing import Any

import pytest
from svc_factories import tiny_request
from svc_harness import Api

from api.problems import problem_document, problem_of
from planner.errors import NotFoundError, UnsupportedPlanError


def _fields(api: Api, body: dict[str, Any]) -> list[str]:
    r = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert r.status_code == 422, r.text
    return [e["field"] for e in r.json()["errors"]]


def test_fields_are_the_paths_in_the_body(api: Api) -> None:
    body = tiny_request()
    body["model"]["ffn_hidden_size"] = -3
    assert _fields(api, body) == ["body.model.ffn_hidden_size"]
    body = tiny_request()
    del body["model"]["hidden_size"]
    assert _fields(api, body) == ["body.model.hidden_size"]
    body = tiny_request(model={"profile_id": 3})
    assert _fields(api, body) == ["body.model.profile_id"]
    body = tiny_request(tags=["fine", "x" * 100])
    assert _fields(api, body) == ["body.tags.1"]


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        (b'{\n  "model": {,}\n}', 2, 13),  # the comma where a key belongs
        (b'{"model": ', 1, 11),  # the end of the text
    ],
)
def test_malformed_json_names_line_and_column(
    api: Api, text: bytes, line: int, column: int
) -> None:
    r = api.client.post(
        "/v1/plans", content=text, headers={**api.acme, "Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    doc = r.json()
    assert doc["detail"].startswith(f"malformed JSON at line {line} column {column}: ")
    assert (doc["errors"][0]["line"], doc["errors"][0]["column"]) == (line, column)


def test_an_infeasible_job_stores_the_problem_a_waiting_client_gets(api: Api) -> None:
    # tp * pp * dp must be the 4 GPUs: neither request has a configuration
    body = tiny_request(constraints={"tp": [2], "pp": [2], "dp": [4]})
    waited = api.client.post("/v1/plans", json=body, headers=api.acme)
    assert waited.status_code == 422, waited.text
    body = tiny_request(constraints={"tp": [2], "pp": [2], "dp": [2]})
    r = api.client.post("/v1/plans", json=body, headers={**api.acme, "Prefer": "respond-async"})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while (job := api.client.get(r.headers["location"], headers=api.acme).json())[
        "status"
    ] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["status"] == "failed"
    sync = waited.json()
    assert {k: job["error"][k] for k in ("type", "title", "status")} == {
        k: sync[k] for k in ("type", "title", "status")
    }


def test_planner_errors_map_to_their_status() -> None:
    problem = problem_of(NotFoundError("no calibration 'x'"))
    assert problem is not None and problem.status == 404
    refused = UnsupportedPlanError("megatron", ["zbv is not a megatron schedule"])
    doc = problem_document(refused)
    assert doc["status"] == 422 and doc["framework"] == "megatron"
    assert problem_document(RuntimeError("boom"))["status"] == 500
