"""api.store.db.loads_json decodes JSON columns to exactly what json.loads gives, including
the texts orjson alone would refuse or read differently."""

from __future__ import annotations

import json

import pytest
from svc_factories import evaluated_result, tiny_request

from api.store.db import loads_json

TEXTS = [
    "[1, 2.5, -0.0, 5e-324, 1E5, true, null]",
    '{"a": 1, "a": 2}',
    '["é→", "\\u00e9"]',
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",  # beyond 64 bits: orjson would give a float
    "-9223372036854775809",
    "[123456789012345678901234567890]",
    "0.1234567890123456789",
    "NaN",
    "[Infinity, -Infinity]",
    "1e400",
    '"\\ud800"',  # a lone surrogate
    "[" * 900 + "]" * 900,
]


@pytest.mark.parametrize("text", TEXTS)
def test_same_value_as_the_standard_library(text: str) -> None:
    expected = json.loads(text)
    for data in (text, text.encode(), memoryview(text.encode())):
        got = loads_json(data)
        assert repr(got) == repr(expected)
        assert type(got) is type(expected)


def test_a_stored_plan_document() -> None:
    result = evaluated_result(tiny_request(), {"tp": 1, "pp": 2, "dp": 2, "schedule": "1f1b"})
    text = json.dumps(result)
    assert loads_json(text.encode()) == json.loads(text) == result


def test_invalid_json_still_raises() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads_json(b"[1,")
