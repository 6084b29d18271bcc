"""Property-based run over the OpenAPI document (schemathesis against a live uvicorn):
no 5xx, every status code and body as documented. A few hundred cases, bounded in time."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import FailedHealthCheck, Unsatisfiable
from svc_harness import ADMIN_KEY, Live, make_settings, serve

from api.app import create_app

pytestmark = [pytest.mark.slow]
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, dict[str, str]]]:
    db = Path(tmp_path_factory.mktemp("st")) / "st.db"
    app = create_app(make_settings(f"sqlite:///{db}", max_time_limit_s=2.0))
    with serve(app) as server:
        key = httpx.post(
            f"{server.url}/v1/keys",
            json={"tenant": "fuzz"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["key"]
        yield server, {"Authorization": f"Bearer {key}"}


CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    schemathesis.checks.response_headers_conformance,
]
EXAMPLES_PER_OPERATION = 25


def test_openapi_conformance(live: tuple[Live, dict[str, str]]) -> None:
    server, headers = live
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    failures: list[str] = []
    operations = 0
    cases = 0
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.generate],
        )
        def run(case: schemathesis.Case[Any]) -> None:
            nonlocal cases
            cases += 1
            case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

        try:
            run()
        except Exception as exc:  # collect every operation's first failure
            failures.append(f"{operation.label}: {str(exc)[:1500]}")
    assert operations >= 15, f"only {operations} operations in the OpenAPI document"
    assert cases >= 200, f"only {cases} cases ran"
    assert not failures, "\n\n".join(failures)


@pytest.fixture(scope="module")
def live_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, dict[str, str]]]:
    name = f"meshplan_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
        with serve(create_app(make_settings(url, max_time_limit_s=2.0))) as server:
            key = httpx.post(
                f"{server.url}/v1/keys",
                json={"tenant": "fuzz"},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            ).json()["key"]
            yield server, {"Authorization": f"Bearer {key}"}
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


NEGATIVE_EXAMPLES_PER_OPERATION = 12


@pytest.mark.postgres
def test_no_server_error_on_postgres(live_pg: tuple[Live, dict[str, str]]) -> None:
    """Invalid and valid input alike (NUL and surrogates included) never gets a 5xx from
    PostgreSQL, which refuses NUL in text."""
    server, headers = live_pg
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    failures: list[str] = []
    cases = 0
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]
        for mode in schemathesis.GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=NEGATIVE_EXAMPLES_PER_OPERATION,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.generate],
            )
            def run(case: schemathesis.Case[Any]) -> None:
                nonlocal cases
                cases += 1
                response = case.call(headers=headers, timeout=30)
                assert response.status_code < 500, (
                    f"{case.method} {case.formatted_path} -> {response.status_code}: "
                    f"{response.text[:500]}"
                )

            try:
                run()
            except (Unsatisfiable, FailedHealthCheck):
                continue  # nothing left to generate for this operation in this mode
            except AssertionError as exc:
                failures.append(f"{operation.label} ({mode.value}): {str(exc)[:1500]}")
    assert cases >= 200, f"only {cases} cases ran"
    assert not failures, "\n\n".join(failures)
