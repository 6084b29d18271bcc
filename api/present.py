"""Rows to response documents, and the opaque page tokens of the history."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime
from typing import Any

import orjson

from api.problems import ProblemError
from api.schemas.plans import PlanListPublic
from api.store.plans import Cursor, PlanFilters, StoredPlan
from api.store.submissions import SubmissionFilters
from planner.plan import recompute_summary
from planner.specs.limits import bad_text_reason


def plan_links(plan_id: str) -> dict[str, str]:
    base = f"/v1/plans/{plan_id}"
    return {
        "self": base,
        "timeline_svg": f"{base}/timeline.svg",
        "launch": f"{base}/launch",
        "runs": f"{base}/runs",
        "page": f"/plans/{plan_id}",
    }


def plan_document(row: StoredPlan, *, cache_hit: bool) -> dict[str, Any]:
    return {
        "id": row.id,
        "created_at": row.created_at.isoformat(),
        "cache_hit": cache_hit,
        "tags": list(row.tags),
        "request": row.request,
        "result": current_result(row.result),
        "links": plan_links(row.id),
        **plan_model(row),
    }


def plan_model(row: StoredPlan) -> dict[str, str | None]:
    """The cost-model version and calibration a stored plan was made with ("unknown": stored
    before plans recorded it)."""
    return {
        "cost_model_version": row.cost_model_version or "unknown",
        "calibration_id": row.calibration_id,
    }


def current_result(result: dict[str, Any]) -> dict[str, Any]:
    """A stored result in today's schema without validating all of it (a large plan takes
    milliseconds): plans stored before `recompute_blocks` existed named the search's
    predominant mode as `recompute`; their summary is taken from their stages again."""
    plans = [result.get("plan"), *result.get("alternatives", ())]
    if all(not isinstance(p, dict) or "recompute_blocks" in p for p in plans):
        return result
    out = dict(result)
    out["plan"] = _summarised(result["plan"])
    out["alternatives"] = [_summarised(p) for p in result.get("alternatives", ())]
    return out


def _summarised(plan: Any) -> Any:
    if not isinstance(plan, dict) or "recompute_blocks" in plan:
        return plan
    stages = plan.get("stages") or ()
    if not all(isinstance(s, dict) and s.get("recompute") for s in stages):
        return plan
    summary, blocks = recompute_summary([m for s in stages for m in s["recompute"]])
    return {**plan, "recompute": summary, "recompute_blocks": blocks}


_SUMMARY_FLOATS = ("step_time_s", "tokens_per_s", "bubble_fraction", "peak_memory_bytes")
"""PlanSummary's float fields: pydantic writes an int given for one as a float (3.0)."""


def history_json(rows: list[dict[str, Any]], next_page_token: str | None) -> bytes:
    """A history page (rows of api.store.plans.SUMMARY_COLUMNS by name, which are PlanSummary's
    fields in its order) as PlanListPublic's JSON: the bytes that
    `PlanListPublic.model_validate(...).model_dump_json()` writes (tests/api/test_history_json.py
    compares them), encoded by orjson straight from the rows instead of validated into models
    and serialised from them. The rows are the store's typed columns, so there is nothing to
    validate; what pydantic would change is changed here: a missing cost-model version is
    "unknown", an int in a float field a float; a UTC time ends in "Z" (`OPT_UTC_Z`), as
    pydantic writes it. A value orjson does not take goes through the response model."""
    data = []
    for row in rows:
        if row["cost_model_version"] is None:
            row = {**row, "cost_model_version": "unknown"}
        if (
            type(row["step_time_s"]) is not float
            or type(row["tokens_per_s"]) is not float
            or type(row["bubble_fraction"]) is not float
            or type(row["peak_memory_bytes"]) is not float
        ):
            ints = {name: float(v) for name in _SUMMARY_FLOATS if type(v := row[name]) is int}
            row = {**row, **ints}
        data.append(row)
    doc = {"data": data, "next_page_token": next_page_token}
    try:
        return orjson.dumps(doc, option=orjson.OPT_UTC_Z)
    except TypeError:  # orjson.JSONEncodeError
        return PlanListPublic.model_validate(doc).model_dump_json().encode()


def filters_key(filters: PlanFilters | SubmissionFilters) -> str:
    """A short digest of the filters, carried in page tokens so that a token is only
    accepted with the filters it was made for."""
    doc = json.dumps(vars(filters), sort_keys=True, default=str)  # flat: asdict's dict
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def encode_cursor(cursor: Cursor, *, filters: PlanFilters | SubmissionFilters) -> str:
    value = cursor.value.isoformat() if isinstance(cursor.value, datetime) else cursor.value
    doc = {"s": cursor.sort, "v": value, "i": cursor.id, "f": filters_key(filters)}
    raw = json.dumps(doc, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(
    token: str, *, sort: str, filters: PlanFilters | SubmissionFilters | None = None
) -> Cursor:
    """The cursor in `token`; 422 naming page_token when it is not one of ours or was made
    for another sort order or (when `filters` is given) other filters."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc = json.loads(raw)
        s, v, i, f = doc["s"], doc["v"], doc["i"], doc.get("f")
        if not isinstance(i, str) or not isinstance(s, str) or bad_text_reason(i):
            raise ValueError("bad types")
        if s.lstrip("-") == "created_at":
            if not isinstance(v, str):
                raise ValueError("bad created_at")
            v = datetime.fromisoformat(v)
        elif not isinstance(v, int | float) or isinstance(v, bool):
            raise ValueError("bad value")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise _bad_token(token, "not a page token from this service") from exc
    if s != sort:
        raise _bad_token(token, f"made for sort={s!r}, not sort={sort!r}")
    if filters is not None and f != filters_key(filters):
        raise _bad_token(token, "made for other filters; a page token only continues its query")
    return Cursor(sort=s, value=v, id=i)


def _bad_token(token: str, why: str) -> ProblemError:
    return ProblemError(
        422,
        "Invalid page token",
        why,
        kind="validation",
        errors=[{"field": "query.page_token", "message": why, "value": token[:200]}],
    )


def newest_first_token(created_at: datetime, last_id: str) -> str:
    """The page token of a newest-first listing (profiles, calibrations): the last row's
    creation time and id."""
    raw = json.dumps([created_at.isoformat(), last_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_newest_first_token(token: str) -> tuple[datetime, str]:
    """The (created_at, id) of `newest_first_token`; 422 naming page_token when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created, last_id = json.loads(raw)
        return datetime.fromisoformat(created), str(last_id)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise _bad_token(token, "not a page token from this service") from exc
