"""planner.memo.PerObject: one build per live object, dropped with it."""

from __future__ import annotations

import gc

from planner.memo import PerObject


class Thing:
    pass


def test_a_value_is_built_once_per_object_and_dropped_with_it() -> None:
    cache: PerObject[list[int]] = PerObject()
    builds: list[int] = []

    def build(n: int) -> list[int]:
        builds.append(n)
        return [n]

    a, b = Thing(), Thing()
    first = cache.get(a, lambda: build(1))
    assert cache.get(a, lambda: build(2)) is first  # not built again
    assert cache.get(b, lambda: build(3)) == [3]
    assert builds == [1, 3] and len(cache) == 2
    del a
    gc.collect()
    assert len(cache) == 1  # a's value went with a
    c = Thing()
    assert cache.get(c, lambda: build(4)) == [4]  # never a stale value for a new object
