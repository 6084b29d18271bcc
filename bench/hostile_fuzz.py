"""Fuzz the live service from its OpenAPI document with schemathesis: positive and negative
cases for every operation, then the stateful phase (chains of calls along the links
schemathesis finds, e.g. a plan's Location into GET /v1/plans/{plan_id}). Prints the cases
run and the 5xx answers found (the goal is 0), per phase.

    PYTHONPATH=. python bench/hostile_fuzz.py [--cases 2000] [--database-url URL]

Without --database-url the service runs on a fresh SQLite file; give a PostgreSQL URL
(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/<db>) to fuzz that backend.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import FailedHealthCheck, Unsatisfiable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "api"))
from svc_harness import ADMIN_KEY, make_settings, serve

from api.app import create_app

SERVER_ERRORS: list[str] = []
COUNTS: Counter[str] = Counter()


def _record(phase: str, case: schemathesis.Case[Any], status: int) -> None:
    COUNTS[phase] += 1
    if status >= 500:
        SERVER_ERRORS.append(f"{phase} {case.method} {case.formatted_path} -> {status}")


def fuzz_operations(schema: Any, headers: dict[str, str], per_operation: int) -> None:
    for result in schema.get_all_operations():
        for mode in schemathesis.GenerationMode:
            fuzz_one(result.ok(), mode, headers, per_operation)


def fuzz_one(operation: Any, mode: Any, headers: dict[str, str], examples: int) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    def run(case: schemathesis.Case[Any]) -> None:
        response = case.call(headers=headers, timeout=60)
        _record(mode.value, case, response.status_code)

    # an operation may have nothing left to generate in a mode
    with contextlib.suppress(Unsatisfiable, FailedHealthCheck):
        run()


def fuzz_stateful(schema: Any, headers: dict[str, str], examples: int) -> None:
    base = schema.as_state_machine()

    class Machine(base):  # type: ignore[valid-type,misc]
        def get_call_kwargs(self, case: schemathesis.Case[Any]) -> dict[str, Any]:
            return {"headers": headers, "timeout": 60}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            _record("stateful", case, response.status_code)

    Machine.TestCase.settings = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        stateful_step_count=6,
    )
    Machine.TestCase().runTest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2500, help="stateless cases to aim at")
    parser.add_argument("--stateful-examples", type=int, default=60, help="state-machine runs")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'fuzz.db'}"
        app = create_app(make_settings(url, max_time_limit_s=2.0))
        with serve(app) as live:
            key = httpx.post(
                f"{live.url}/v1/keys",
                json={"tenant": "fuzz"},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            ).json()["key"]
            headers = {"Authorization": f"Bearer {key}"}
            schema = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
            operations = sum(1 for _ in schema.get_all_operations())
            per_operation = -(-args.cases // (2 * operations))
            start = time.perf_counter()
            fuzz_operations(schema, headers, per_operation)
            stateless_s = time.perf_counter() - start
            start = time.perf_counter()
            fuzz_stateful(schema, headers, args.stateful_examples)
            stateful_s = time.perf_counter() - start
    total = sum(COUNTS.values())
    backend = url.split(":")[0]
    print(f"schemathesis {version('schemathesis')}, {operations} operations, {backend}")
    print(f"positive cases: {COUNTS['positive']}, negative cases: {COUNTS['negative']}")
    print(f"stateless phase: {stateless_s:.0f} s")
    print(f"stateful calls: {COUNTS['stateful']} ({stateful_s:.0f} s)")
    print(f"cases run: {total}, 5xx found: {len(SERVER_ERRORS)}")
    for line in SERVER_ERRORS[:50]:
        print("  " + line)
    sys.exit(1 if SERVER_ERRORS else 0)


if __name__ == "__main__":
    main()
