"""Plans: insert, fetch, the cache lookup and the history query with keyset pagination."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Engine,
    Row,
    Select,
    Table,
    and_,
    bindparam,
    exists,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from api.store.db import read_rows, read_scalar
from api.store.ids import new_id
from api.store.tables import PlanRow, PlanTagRow, SubmissionRow, utcnow
from planner.cost.version import COST_MODEL_VERSION

UNKNOWN_VERSION = "unknown"
"""The `cost_model_version` filter value that selects plans stored before plans recorded it."""
DEFAULT_CALIBRATION = "none"
"""The `calibration_id` filter value that selects plans made with the catalog's defaults."""

SortKey = Literal[
    "created_at", "-created_at", "step_time_s", "-step_time_s", "tokens_per_s", "-tokens_per_s"
]


PLANS: Table = PlanRow.__table__  # type: ignore[assignment]
SUMMARY_COLUMNS = (
    "id",
    "created_at",
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
    "cost_model_version",
    "calibration_id",
)
"""What a history row shows (api.schemas.plans.PlanSummary's fields, in its order:
api.present.history_json writes a row's keys in this order)."""
DOCUMENT_COLUMNS = (
    "id",
    "created_at",
    "gpu",
    "tags",
    "cost_model_version",
    "calibration_id",
    "request",
    "result",
)
"""What a plan's readers use: its document (api.present.plan_document), and the GPU the plan
page's calibration section names."""


class StoredPlan(Protocol):
    """A stored plan as its readers see it: a row of DOCUMENT_COLUMNS (`get_plan`,
    `find_cached`; SQLAlchemy Core, no ORM object is built), or the `PlanRow` that
    `insert_plan` returns."""

    @property
    def id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def gpu(self) -> str: ...
    @property
    def tags(self) -> list[str]: ...
    @property
    def cost_model_version(self) -> str | None: ...
    @property
    def calibration_id(self) -> str | None: ...
    @property
    def request(self) -> dict[str, Any]: ...
    @property
    def result(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PlanFilters:
    model_name: str | None = None
    model_hash: str | None = None
    gpu: str | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None
    schedule: str | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    tag: str | None = None
    cost_model_version: str | None = None  # UNKNOWN_VERSION: stored before it was recorded
    calibration_id: str | None = None  # DEFAULT_CALIBRATION: the catalog defaults


@dataclass(frozen=True)
class Cursor:
    """Where a page ends: the sort value and id of its last row (keyset pagination)."""

    sort: str
    value: Any
    id: str


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]  # SUMMARY_COLUMNS by name
    next_cursor: Cursor | None


def insert_plan(
    session: Session,
    *,
    tenant: str,
    request_hash: str,
    request: dict[str, Any],
    result: dict[str, Any],
    tags: list[str],
    created_at: datetime | None = None,
    plan_id: str | None = None,
    cost_model_version: str | None = COST_MODEL_VERSION,
) -> PlanRow:
    """Store a plan (the full JSON plus the denormalised columns the history filters on).

    `cost_model_version` is the model the result was computed with: today's for a result just
    computed (the default); the calibration id comes from the result's plan."""
    plan = result["plan"]
    pred = plan["prediction"]
    row = PlanRow(
        id=plan_id or new_id(),
        tenant=tenant,
        request_hash=request_hash,
        created_at=created_at or utcnow(),
        model_name=plan["model_name"],
        model_hash=plan["model_hash"],
        gpu=plan["gpu"],
        num_gpus=plan["num_gpus"],
        schedule=plan["schedule"],
        tp=plan["tp"],
        pp=plan["pp"],
        dp=plan["dp"],
        vpp=plan["vpp"],
        micro_batch_size=plan["micro_batch_size"],
        step_time_s=pred["step_time_s"],
        tokens_per_s=pred["tokens_per_s"],
        bubble_fraction=pred["bubble_fraction"],
        peak_memory_bytes=pred["peak_memory_bytes"],
        search_wall_s=result.get("search", {}).get("wall_time_s", 0.0),
        tags=sorted(set(tags)),
        cost_model_version=cost_model_version,
        calibration_id=plan.get("calibration_id"),
        request=request,
        result=result,
    )
    session.add(row)
    for tag in row.tags:
        session.add(PlanTagRow(plan_id=row.id, tag=tag, tenant=tenant))
    session.flush()
    return row


_DOCUMENT = [PLANS.c[name] for name in DOCUMENT_COLUMNS]
_SUMMARY = [PLANS.c[name] for name in SUMMARY_COLUMNS]
_SUBMISSIONS: Table = SubmissionRow.__table__  # type: ignore[assignment]

# The hot reads' statements are built once, their values bound per call: building a statement
# and its cache key costs more CPU than running it (bench/api_profile.py).
_GET_DOCUMENT = select(
    *_DOCUMENT,
    exists()
    .where(_SUBMISSIONS.c.tenant == bindparam("tenant"), _SUBMISSIONS.c.plan_id == PLANS.c.id)
    .label("has_submissions"),
).where(PLANS.c.id == bindparam("plan_id"), PLANS.c.tenant == bindparam("tenant"))


def _newest_for_request(*columns: Any) -> Select[Any]:
    """`columns` of the newest plan of a tenant for a request hash under a cost-model version
    (the plan a cached POST answers with)."""
    return (
        select(*columns)
        .where(
            PLANS.c.tenant == bindparam("tenant"),
            PLANS.c.request_hash == bindparam("request_hash"),
            PLANS.c.cost_model_version == bindparam("version"),
        )
        .order_by(PLANS.c.created_at.desc(), PLANS.c.id.desc())
        .limit(1)
    )


_FIND_CACHED = _newest_for_request(*_DOCUMENT)
_FIND_CACHED_ID = _newest_for_request(PLANS.c.id)
_HAS_SUBMISSIONS = select(
    exists().where(
        _SUBMISSIONS.c.tenant == bindparam("tenant"), _SUBMISSIONS.c.plan_id == bindparam("plan_id")
    )
)


def get_plan(session: Session, *, tenant: str, plan_id: str) -> Row[Any] | None:
    """A plan's DOCUMENT_COLUMNS and `has_submissions` (whether any submission names it), in
    one statement: what every reader of a stored plan uses (its document, its request and
    result for launch configs, runs, timelines, submissions and replans)."""
    return session.execute(_GET_DOCUMENT, {"tenant": tenant, "plan_id": plan_id}).first()


def find_cached(session: Session, *, tenant: str, request_hash: str) -> Row[Any] | None:
    """The newest plan (DOCUMENT_COLUMNS) of this tenant for the same normalised request made
    under today's cost-model version (a plan chosen by another model is not today's answer)."""
    params = {"tenant": tenant, "request_hash": request_hash, "version": COST_MODEL_VERSION}
    return session.execute(_FIND_CACHED, params).first()


def find_cached_id(engine: Engine, *, tenant: str, request_hash: str) -> str | None:
    """The id of the plan `find_cached` returns, without its document (for a reader that has
    the document already: api.doccache); one `read_scalar`."""
    params = {"tenant": tenant, "request_hash": request_hash, "version": COST_MODEL_VERSION}
    found = read_scalar(engine, _FIND_CACHED_ID, params)
    return None if found is None else str(found)


def has_submissions(engine: Engine, *, tenant: str, plan_id: str) -> bool:
    """Whether any submission of this tenant names the plan (`get_plan`'s `has_submissions`
    alone); one `read_scalar`."""
    return bool(read_scalar(engine, _HAS_SUBMISSIONS, {"tenant": tenant, "plan_id": plan_id}))


def count_plans(session: Session, *, tenant: str, request_hash: str | None = None) -> int:
    from sqlalchemy import func

    stmt = select(func.count()).select_from(PlanRow).where(PlanRow.tenant == tenant)
    if request_hash is not None:
        stmt = stmt.where(PlanRow.request_hash == request_hash)
    return int(session.scalar(stmt) or 0)


_EQUAL = ("model_name", "model_hash", "gpu", "schedule", "tp", "pp", "dp")
_COMPARED: dict[str, tuple[str, Callable[[Any, Any], ColumnElement[bool]]]] = {
    "min_gpus": ("num_gpus", operator.ge),
    "max_gpus": ("num_gpus", operator.le),
    "created_after": ("created_at", operator.gt),
    "created_before": ("created_at", operator.lt),
}
_SPECIAL = {"cost_model_version": UNKNOWN_VERSION, "calibration_id": DEFAULT_CALIBRATION}


def _shape(f: PlanFilters) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Which filters are set (the statement's shape: a filter set to its special value is
    its own shape) and the values to bind."""
    shape: list[str] = []
    params: dict[str, Any] = {}
    for name, value in vars(f).items():
        if value is None:
            continue
        if _SPECIAL.get(name) == value:
            shape.append(f"{name}={value}")
        else:
            shape.append(name)
            params[name] = value
    return tuple(shape), params


def _condition(name: str) -> ColumnElement[bool]:
    """The condition of one filter of `_shape`, its value bound by the filter's name."""
    c = PLANS.c
    if name in _EQUAL or name in _SPECIAL:
        return c[name] == bindparam(name)
    if name in _COMPARED:
        column, op = _COMPARED[name]
        return op(c[column], bindparam(name))
    if name == "tag":
        tags: Table = PlanTagRow.__table__  # type: ignore[assignment]
        return exists().where(
            tags.c.plan_id == c.id,
            tags.c.tenant == bindparam("tenant"),
            tags.c.tag == bindparam(name),
        )
    if name == f"cost_model_version={UNKNOWN_VERSION}":  # stored before versions were recorded
        return c.cost_model_version.is_(None)
    if name == f"calibration_id={DEFAULT_CALIBRATION}":  # a known version, no calibration
        return and_(c.calibration_id.is_(None), c.cost_model_version.is_not(None))
    raise ValueError(f"no history filter {name!r}")


@functools.lru_cache(maxsize=512)
def _history(shape: tuple[str, ...], sort: str, paged: bool) -> Select[Any]:
    """The history statement for one shape of filters, sort order and whether it continues
    after a cursor; built once per shape (values are bound per query)."""
    desc = sort.startswith("-")
    col, id_col = PLANS.c[sort.lstrip("-")], PLANS.c.id
    conds = [PLANS.c.tenant == bindparam("tenant"), *(_condition(name) for name in shape)]
    if paged:
        # a row comparison, not `col < v OR (col = v AND id < i)`: PostgreSQL bounds the index
        # scan by it (a page after 900 rows of the load bench's filters: 59 buffers, 0.13 ms;
        # the OR took a bitmap scan of 143 buffers, 6.4 ms); SQLite has row values since 3.15
        value: BindParameter[Any] = bindparam("after_value", type_=col.type)
        after_id: BindParameter[Any] = bindparam("after_id", type_=id_col.type)
        key, after = tuple_(col, id_col), tuple_(value, after_id)
        conds.append(key < after if desc else key > after)
    order = (col.desc(), id_col.desc()) if desc else (col.asc(), id_col.asc())
    return select(*_SUMMARY).where(*conds).order_by(*order).limit(bindparam("limit"))


def list_plans(
    engine: Engine,
    *,
    tenant: str,
    filters: PlanFilters,
    sort: str = "-created_at",
    page_size: int = 50,
    after: Cursor | None = None,
) -> Page:
    """One page of the history (SUMMARY_COLUMNS rows as dicts), ordered by (sort column, id);
    stable under inserts. One `read_rows`: the page is the API's most frequent multi-row read."""
    shape, params = _shape(filters)
    params.update(tenant=tenant, limit=page_size + 1)
    if after is not None:
        params.update(after_value=after.value, after_id=after.id)
    found = read_rows(engine, _history(shape, sort, after is not None), params)
    rows = [dict(zip(SUMMARY_COLUMNS, r, strict=True)) for r in found[:page_size]]
    next_cursor = None
    if len(found) > page_size:
        last = rows[-1]
        next_cursor = Cursor(sort=sort, value=last[sort.lstrip("-")], id=last["id"])
    return Page(rows=rows, next_cursor=next_cursor)


def bulk_insert(session: Session, *, rows: list[dict[str, Any]]) -> None:
    """Insert many plans at once (column dicts as `insert_plan` would build; for benchmarks
    and imports). Tags go to the tag table too."""
    from sqlalchemy import insert

    session.execute(insert(PlanRow), rows)
    tag_rows = [
        {"plan_id": r["id"], "tag": t, "tenant": r["tenant"]} for r in rows for t in r["tags"]
    ]
    if tag_rows:
        session.execute(insert(PlanTagRow), tag_rows)
