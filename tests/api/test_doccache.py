"""api.doccache.DocumentCache on its own: least recently used out first, bounded by entries
and by bytes (gzip encodings included), off at 0."""

from __future__ import annotations

import gzip

import pytest

from api.doccache import DocumentCache, gzip_bytes


def test_entries_bound_evicts_the_least_recently_used() -> None:
    cache = DocumentCache(max_entries=2, max_bytes=10_000)
    cache.put("t", "a", "get", b"A" * 10)
    cache.put("t", "b", "get", b"B" * 10)
    assert cache.get("t", "a", "get") is not None  # a is now the most recently used
    cache.put("t", "c", "get", b"C" * 10)
    assert cache.get("t", "b", "get") is None
    assert cache.get("t", "a", "get") is not None and cache.get("t", "c", "get") is not None
    stats = cache.stats()
    assert (stats.entries, stats.size_bytes, stats.evictions) == (2, 20, 1)


def test_bytes_bound_evicts_until_it_fits() -> None:
    cache = DocumentCache(max_entries=100, max_bytes=25)
    for name in "abc":
        cache.put("t", name, "get", name.encode() * 10)
    assert [cache.get("t", n, "get") is not None for n in "abc"] == [False, True, True]
    assert cache.stats().size_bytes == 20
    cache.put("t", "huge", "get", b"x" * 26)  # larger than the whole cache: not kept
    assert cache.get("t", "huge", "get") is None and cache.stats().entries == 2


def test_a_gzip_encoding_counts_and_can_evict() -> None:
    body = bytes(range(256)) * 8  # 2 KiB that compress poorly
    cache = DocumentCache(max_entries=100, max_bytes=2 * len(body) + 100)
    cache.put("t", "old", "get", body)
    entry = cache.put("t", "new", "get", body)
    assert cache.stats().size_bytes == 2 * len(body)
    packed = cache.gzipped("t", "new", "get", entry)
    assert gzip.decompress(packed) == body
    assert cache.gzipped("t", "new", "get", entry) is packed  # compressed once
    assert cache.get("t", "old", "get") is None  # the gzip bytes pushed it out
    assert cache.stats().size_bytes == len(body) + len(packed)


def test_views_and_tenants_are_separate_entries() -> None:
    cache = DocumentCache(max_entries=10, max_bytes=10_000)
    cache.put("acme", "p", "get", b"get")
    cache.put("acme", "p", "hit", b"hit")
    assert cache.get("globex", "p", "get") is None
    got, hit = cache.get("acme", "p", "get"), cache.get("acme", "p", "hit")
    assert got is not None and hit is not None and (got.body, hit.body) == (b"get", b"hit")


def test_zero_keeps_nothing() -> None:
    for cache in (DocumentCache(0, 1000), DocumentCache(10, 0)):
        entry = cache.put("t", "a", "get", b"{}")
        assert entry.body == b"{}" and cache.get("t", "a", "get") is None
        assert cache.stats().entries == 0
    with pytest.raises(ValueError, match="max_entries"):
        DocumentCache(-1, 10)


def test_gzip_bytes_is_gzip() -> None:
    body = b'{"a": 1}' * 200
    assert gzip.decompress(gzip_bytes(body)) == body
