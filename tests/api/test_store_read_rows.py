"""api.store.db.read_rows gives the rows SQLAlchemy's own execution gives (the same values and
types: aware UTC datetimes, decoded JSON, floats and ints), on SQLite and PostgreSQL, for the
history's statements with every kind of parameter (strings, ints, an aware datetime, a
cursor's float and id)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from svc_factories import synthetic_rows

from api.store import migrate
from api.store import plans as plan_store
from api.store.db import make_engine, make_sessionmaker, read_rows, read_scalar, session_scope
from api.store.plans import Cursor, PlanFilters

FILTERS = [
    PlanFilters(),
    PlanFilters(model_name="gpt-3", gpu="H100-SXM-80GB", min_gpus=32, max_gpus=256),
    PlanFilters(created_after=datetime(2026, 1, 1, 0, 10, tzinfo=UTC)),
    PlanFilters(created_before=datetime(2026, 1, 1, 1, 20, tzinfo=timezone(timedelta(hours=1)))),
    PlanFilters(tag="team-2"),
    PlanFilters(cost_model_version="unknown"),
]


def _typed(rows: list[tuple[object, ...]]) -> list[list[tuple[type, object]]]:
    return [[(type(v), v) for v in r] for r in rows]


def test_same_rows_as_session_execute(db_url: str) -> None:
    migrate.upgrade(db_url)
    engine = make_engine(db_url)
    try:
        rows = synthetic_rows(300, tenant="acme", seed=7)
        for r in rows[::3]:
            r["cost_model_version"] = None
        with session_scope(make_sessionmaker(engine)) as session:
            plan_store.bulk_insert(session, rows=rows)
        sessions = make_sessionmaker(engine)
        compared = 0
        for filters in FILTERS:
            for sort in ("-created_at", "step_time_s"):
                shape, params = plan_store._shape(filters)
                params.update(tenant="acme", limit=40)
                for after in (None, rows[5], rows[17]):
                    if after is not None:
                        key = sort.lstrip("-")
                        cursor = Cursor(sort=sort, value=after[key], id=after["id"])
                        params.update(after_value=cursor.value, after_id=cursor.id)
                    statement = plan_store._history(shape, sort, after is not None)
                    with sessions() as session:
                        expected = [tuple(r) for r in session.execute(statement, params).all()]
                    got = read_rows(engine, statement, params)
                    assert _typed(got) == _typed(expected)
                    compared += len(got)
        assert compared > 500  # the filters select rows: the comparison is not vacuous
        first = read_rows(
            engine,
            plan_store._history((), "-created_at", False),
            {"tenant": "acme", "limit": 5},
            first=True,
        )
        assert len(first) == 1
        newest = max(rows, key=lambda r: (r["created_at"], r["id"]))
        assert first[0][0] == newest["id"]
        assert first[0][1] == newest["created_at"] and first[0][1].tzinfo is not None
        none = plan_store._history((), "-created_at", False)
        assert read_rows(engine, none, {"tenant": "nobody", "limit": 5}) == []
        assert read_scalar(engine, none, {"tenant": "nobody", "limit": 5}) is None
    finally:
        engine.dispose()
