"""The history page's JSON (api.present.history_json, encoded by orjson from the rows) is the
bytes the response model writes: `PlanListPublic.model_validate(...).model_dump_json()` of the
same rows, with a missing cost-model version shown as "unknown"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from svc_factories import synthetic_rows
from svc_harness import Api

from api.present import decode_cursor, history_json
from api.schemas.plans import PlanListPublic, PlanSummary
from api.store import plans as plan_store
from api.store.db import session_scope
from api.store.plans import SUMMARY_COLUMNS, PlanFilters


def _pydantic(rows: list[dict[str, Any]], token: str | None) -> bytes:
    data = [{**r, "cost_model_version": r["cost_model_version"] or "unknown"} for r in rows]
    body = {"data": data, "next_page_token": token}
    return PlanListPublic.model_validate(body).model_dump_json().encode()


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "0000000012ab34cd56ef7890",
        "created_at": datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC),
        "model_name": "gpt-7",
        "model_hash": "ab" * 32,
        "gpu": "H100-SXM-80GB",
        "num_gpus": 64,
        "schedule": "1f1b",
        "tp": 4,
        "pp": 2,
        "dp": 8,
        "vpp": 1,
        "micro_batch_size": 2,
        "step_time_s": 1.2345678901234567,
        "tokens_per_s": 123456.789,
        "bubble_fraction": 0.1,
        "peak_memory_bytes": 7.5e10,
        "tags": ["team-1"],
        "cost_model_version": "2026.1",
        "calibration_id": None,
    }
    row.update(overrides)
    return row


def test_summary_columns_are_the_models_fields_in_order() -> None:
    # orjson writes a row's keys in the row's order; pydantic in the model's
    assert tuple(PlanSummary.model_fields) == SUMMARY_COLUMNS


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"created_at": datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)},  # no microseconds
        {"created_at": datetime(2026, 3, 4, 5, 6, 7, 120, tzinfo=UTC)},
        {"cost_model_version": None},
        {"calibration_id": "cal_0123456789abcdef"},
        {"peak_memory_bytes": 3, "step_time_s": 2, "tokens_per_s": 0, "bubble_fraction": 1},
        {"step_time_s": 1e-7, "tokens_per_s": 1.5e300, "bubble_fraction": 5e-324},
        {"tokens_per_s": float("inf"), "bubble_fraction": float("nan")},
        {"model_name": 'gpt-ü "quoted"\n\t\\ \u2028 \x7f \x01 \U0001f600', "tags": []},
        {"tags": ["é", "a b", "x" * 200, "1234567890123456789012"]},
    ],
)
def test_encoded_as_the_response_model_writes_it(overrides: dict[str, Any]) -> None:
    rows = [_row(**overrides), _row(id="0000000112ab34cd56ef7891")]
    for token in (None, "eyJzIjoiLWNyZWF0ZWRfYXQifQ"):
        assert history_json(rows, token) == _pydantic(rows, token)
    assert history_json([], None) == _pydantic([], None)


def test_rows_are_not_changed() -> None:
    rows = [_row(cost_model_version=None, peak_memory_bytes=3)]
    before = [dict(r) for r in rows]
    history_json(rows, None)
    assert rows == before and type(rows[0]["peak_memory_bytes"]) is int


def test_service_page_is_the_models_encoding_of_the_stored_rows(api: Api) -> None:
    data = synthetic_rows(30, tenant="acme", seed=3)
    t0 = datetime(2026, 5, 1, tzinfo=UTC)
    for i, r in enumerate(data):
        r["created_at"] = t0 + timedelta(seconds=i, microseconds=(i % 3) * 250_000)
        if i % 4 == 0:
            r["cost_model_version"] = None
        else:
            r["cost_model_version"] = "2026.1"
            r["calibration_id"] = f"cal_{i:04d}" if i % 2 else None
        if i % 5 == 0:
            r["peak_memory_bytes"] = 3  # an int given for a float column
        r["model_name"] = f"gpt-ü-{i % 3}"
        r["tags"] = [f"team-{i % 5}", "é"] if i % 2 else []
    with session_scope(api.app.state.meshplan.sessions) as session:
        plan_store.bulk_insert(session, rows=data)
    engine = api.app.state.meshplan.engine
    token = None
    for _ in range(4):  # pages of 8, the last one short
        params: dict[str, Any] = {"page_size": 8, "sort": "-created_at"}
        token_in = token
        if token_in:
            params["page_token"] = token_in
        r = api.client.get("/v1/plans", params=params, headers=api.acme)
        assert r.status_code == 200, r.text
        token = r.json()["next_page_token"]
        after = decode_cursor(token_in, sort="-created_at") if token_in else None
        page = plan_store.list_plans(
            engine, tenant="acme", filters=PlanFilters(), page_size=8, after=after
        )
        assert r.content == _pydantic(page.rows, token)
    assert token is None
