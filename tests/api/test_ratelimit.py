"""Rate limits per API key, over real HTTP against a live uvicorn: a burst beyond the limit
gets 429 problem+json with a Retry-After that, once waited, lets the key in again; other keys
and the health endpoints are unaffected; --dev-open turns the limit off."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from svc_harness import ADMIN_KEY, Live, make_settings, serve

from api.app import create_app
from api.ratelimit import RateLimit, TokenBuckets, caller_id, presented_key
from api.store.keys import hash_key

RATE_PER_S = 1.0
BURST = 5


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Live]:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'rl.db'}", rate_limit_per_s=RATE_PER_S, rate_limit_burst=BURST
    )
    with serve(create_app(settings)) as live:
        yield live


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _new_key(client: httpx.Client, tenant: str) -> dict[str, str]:
    r = client.post("/v1/keys", json={"tenant": tenant}, headers=_bearer(ADMIN_KEY))
    assert r.status_code == 201, r.text
    return _bearer(r.json()["key"])


def _burst(client: httpx.Client, headers: dict[str, str], n: int) -> list[httpx.Response]:
    return [client.get("/v1/plans", headers=headers) for _ in range(n)]


def test_burst_beyond_the_limit_gets_429_and_retry_after_is_honoured(limited: Live) -> None:
    with httpx.Client(base_url=limited.url, timeout=10) as client:
        acme = _new_key(client, "acme")
        globex = _new_key(client, "globex")
        t0 = time.monotonic()
        replies = _burst(client, acme, BURST + 8)
        refilled = int((time.monotonic() - t0) * RATE_PER_S)  # tokens back during the burst
        codes = [r.status_code for r in replies]
        # a key's first request authenticates it (its address's bucket); then it has BURST
        assert codes[: BURST + 1] == [200] * (BURST + 1), codes
        assert set(codes) == {200, 429} and codes.count(200) <= BURST + 1 + refilled, codes
        refused = next(r for r in replies if r.status_code == 429)
        assert refused.headers["content-type"].startswith("application/problem+json")
        doc = refused.json()
        assert doc["status"] == 429 and doc["burst"] == BURST
        assert doc["rate_per_s"] == RATE_PER_S
        retry_after = int(refused.headers["Retry-After"])
        # one token comes back every 1/RATE_PER_S seconds
        assert 1 <= retry_after <= 1 / RATE_PER_S
        assert doc["retry_after_s"] == retry_after

        # other keys and the health endpoints are unaffected while acme waits
        assert client.get("/v1/plans", headers=globex).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics"):
            for _ in range(BURST + 2):
                assert client.get(path, headers=acme).status_code == 200, path

        _burst(client, acme, BURST + 2)  # empty the bucket again
        last = client.get("/v1/plans", headers=acme)
        assert last.status_code == 429
        time.sleep(int(last.headers["Retry-After"]))
        assert client.get("/v1/plans", headers=acme).status_code == 200


def test_unknown_keys_share_their_address_bucket(limited: Live) -> None:
    """Inventing a new key per request does not escape the limit (each would be a look-up)."""
    with httpx.Client(base_url=limited.url, timeout=10) as client:
        codes = [
            client.get("/v1/plans", headers=_bearer("mp_" + secrets.token_hex(16))).status_code
            for _ in range(BURST + 2)
        ]
    assert codes[:BURST] == [401] * BURST and codes[BURST:] == [429, 429], codes


def test_dev_open_has_no_limit(tmp_path: Path) -> None:
    settings = make_settings(
        f"sqlite:///{tmp_path / 'open.db'}", dev_open=True, rate_limit_per_s=1.0, rate_limit_burst=1
    )
    with serve(create_app(settings)) as live, httpx.Client(base_url=live.url) as client:
        codes = {client.get("/v1/plans").status_code for _ in range(10)}
    assert codes == {200}


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    clock = _Clock()
    buckets = TokenBuckets(RateLimit(rate_per_s=4.0, burst=3), clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.25)  # one token per 1/4 s
    assert buckets.take("b") == 0.0  # another caller has its own bucket
    clock.now += 0.125  # half a token back
    assert buckets.take("a") == pytest.approx(0.125)
    clock.now += 60.0  # long idle: refilled to the burst, no more
    assert [buckets.take("a") for _ in range(4)][-1] == pytest.approx(0.25)


def test_least_recently_seen_callers_are_forgotten_beyond_max_buckets() -> None:
    clock = _Clock()
    buckets = TokenBuckets(RateLimit(rate_per_s=1.0, burst=1, max_buckets=2), clock=clock)
    assert buckets.take("a") == 0.0 and buckets.take("a") > 0
    buckets.take("b")
    buckets.take("c")  # "a" is the least recently seen of three: forgotten
    assert buckets.take("a") == 0.0


@pytest.mark.parametrize(
    ("rate", "burst", "field"),
    [(0.0, 1, "rate_per_s"), (float("inf"), 1, "rate_per_s"), (1, 0, "burst")],
)
def test_limit_is_validated(rate: float, burst: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RateLimit(rate_per_s=rate, burst=burst)


def test_openapi_declares_429_except_on_health(limited: Live) -> None:
    doc = httpx.get(f"{limited.url}/openapi.json").json()
    post = doc["paths"]["/v1/plans"]["post"]["responses"]["429"]
    assert "Retry-After" in post["headers"]
    assert "429" not in doc["paths"]["/healthz"]["get"]["responses"]
    assert "429" in doc["paths"]["/v1/plans/{plan_id}"]["get"]["responses"]


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        ([(b"authorization", b"Bearer mp_a")], b"", "mp_a"),
        ([(b"authorization", b"bearer  mp_a ")], b"key=mp_b", "mp_a"),  # the API's header first
        ([], b"x=1&key=mp_%2Bb", "mp_+b"),  # as the pages read ?key= (decoded)
        ([(b"cookie", b"other=1; meshplan_key=mp_c")], b"", "mp_c"),
        ([(b"authorization", b"Basic abc")], b"", None),
    ],
)
def test_the_key_is_read_as_auth_reads_it(
    headers: list[tuple[bytes, bytes]], query: bytes, expected: str | None
) -> None:
    scope = {"type": "http", "headers": headers, "query_string": query, "client": ("10.0.0.7", 1)}
    assert presented_key(scope) == expected
    known = caller_id(scope, lambda digest: True)
    unknown = caller_id(scope, lambda digest: False)
    assert unknown == "addr:10.0.0.7"
    assert known == (f"key:{hash_key(expected)}" if expected else "addr:10.0.0.7")
