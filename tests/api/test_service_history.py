"""History: cursor pagination (complete, disjoint, stable under inserts), filters, sorts, and
tenant isolation, over rows stored through the store on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from svc_factories import synthetic_rows
from svc_harness import Api

from api.store.db import session_scope
from api.store.plans import bulk_insert

N = 120


def _store(api: Api, rows: list[dict[str, Any]]) -> None:
    with session_scope(api.app.state.meshplan.sessions) as session:
        bulk_insert(session, rows=rows)


def _all_pages(api: Api, params: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    token = None
    for _ in range(1000):
        q = dict(params)
        if token:
            q["page_token"] = token
        r = api.client.get("/v1/plans", params=q, headers=api.acme)
        assert r.status_code == 200, r.text
        body = r.json()
        out.extend(body["data"])
        token = body["next_page_token"]
        if token is None:
            return out
    raise AssertionError("pagination did not end")


@pytest.fixture
def rows(api: Api) -> list[dict[str, Any]]:
    data = synthetic_rows(N, tenant="acme", seed=1)
    _store(api, data)
    return data


def test_pages_cover_everything_once(api: Api, rows: list[dict[str, Any]]) -> None:
    got = _all_pages(api, {"page_size": 7})
    ids = [p["id"] for p in got]
    assert len(ids) == len(set(ids)) == N
    created = [p["created_at"] for p in got]
    assert created == sorted(created, reverse=True)  # newest first by default


@pytest.mark.parametrize("sort", ["step_time_s", "-step_time_s", "tokens_per_s", "created_at"])
def test_sorts(api: Api, rows: list[dict[str, Any]], sort: str) -> None:
    got = _all_pages(api, {"page_size": 11, "sort": sort})
    key = sort.lstrip("-")
    values = [p[key] for p in got]
    assert values == sorted(values, reverse=sort.startswith("-"))
    assert len({p["id"] for p in got}) == N


def test_cursor_is_stable_under_inserts(api: Api, rows: list[dict[str, Any]]) -> None:
    first = api.client.get("/v1/plans", params={"page_size": 10}, headers=api.acme).json()
    # new plans arrive (newer than everything) while the client pages on
    newer = synthetic_rows(15, tenant="acme", seed=99)
    for r in newer:
        r["id"] = "z" + r["id"][1:]
        r["created_at"] = r["created_at"].replace(year=2027)
    _store(api, newer)
    rest = _all_pages(api, {"page_size": 10, "page_token": first["next_page_token"]})
    seen = [p["id"] for p in first["data"]] + [p["id"] for p in rest]
    assert len(seen) == len(set(seen)) == N  # no row twice, none missed, none of the new ones
    assert not {r["id"] for r in newer} & set(seen)


def _expected(rows: list[dict[str, Any]], pred: Any) -> set[str]:
    return {r["id"] for r in rows if pred(r)}


@pytest.mark.parametrize(
    ("params", "pred"),
    [
        ({"model_name": "gpt-3"}, lambda r: r["model_name"] == "gpt-3"),
        ({"gpu": "H100-SXM-80GB"}, lambda r: r["gpu"] == "H100-SXM-80GB"),
        ({"min_gpus": 32, "max_gpus": 128}, lambda r: 32 <= r["num_gpus"] <= 128),
        ({"schedule": "gpipe"}, lambda r: r["schedule"] == "gpipe"),
        ({"tp": 2, "pp": 2}, lambda r: r["tp"] == 2 and r["pp"] == 2),
        ({"dp": 4}, lambda r: r["dp"] == 4),
        ({"tag": "team-3"}, lambda r: "team-3" in r["tags"]),
        (
            {"gpu": "A100-SXM-80GB", "tag": "team-1", "min_gpus": 64},
            lambda r: r["gpu"] == "A100-SXM-80GB" and "team-1" in r["tags"] and r["num_gpus"] >= 64,
        ),
        (
            {"created_after": "2026-01-01T00:05:00Z", "created_before": "2026-01-01T00:10:00Z"},
            lambda r: (
                datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
                < r["created_at"]
                < datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
            ),
        ),
    ],
)
def test_filters(api: Api, rows: list[dict[str, Any]], params: dict[str, Any], pred: Any) -> None:
    want = _expected(rows, pred)
    assert want, "the synthetic data should exercise this filter"
    got = {p["id"] for p in _all_pages(api, {**params, "page_size": 13})}
    assert got == want


def test_model_hash_filter(api: Api, rows: list[dict[str, Any]]) -> None:
    h = rows[0]["model_hash"]
    got = {p["id"] for p in _all_pages(api, {"model_hash": h, "page_size": 50})}
    assert got == _expected(rows, lambda r: r["model_hash"] == h)
    assert _all_pages(api, {"model_hash": "0" * 16}) == []


def test_other_tenant_sees_nothing(api: Api, rows: list[dict[str, Any]]) -> None:
    r = api.client.get("/v1/plans", headers=api.globex)
    assert r.status_code == 200 and r.json()["data"] == []
    pid = rows[0]["id"]
    assert api.client.get(f"/v1/plans/{pid}", headers=api.acme).status_code == 200
    r = api.client.get(f"/v1/plans/{pid}", headers=api.globex)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    for path in (f"/v1/plans/{pid}/runs", f"/v1/plans/{pid}/launch"):
        assert api.client.get(path, headers=api.globex).status_code == 404


def test_bad_page_tokens(api: Api, rows: list[dict[str, Any]]) -> None:
    r = api.client.get("/v1/plans", params={"page_token": "garbage!"}, headers=api.acme)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "query.page_token"
    token = api.client.get("/v1/plans", params={"page_size": 2}, headers=api.acme).json()[
        "next_page_token"
    ]
    r = api.client.get(
        "/v1/plans", params={"page_token": token, "sort": "step_time_s"}, headers=api.acme
    )
    assert r.status_code == 422 and "sort" in r.json()["detail"]
