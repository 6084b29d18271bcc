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


def test_threads_asking_at_once_all_get_the_one_value_stored() -> None:
    import threading

    cache: PerObject[list[int]] = PerObject()
    obj = Thing()
    start = threading.Barrier(8)
    got: list[list[int]] = []

    def ask(n: int) -> None:
        start.wait()  # every thread misses the cache before any stores
        got.append(cache.get(obj, lambda: [n]))

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(v is got[0] for v in got)  # the first stored, for all
    assert len(cache) == 1 and cache.get(obj, lambda: [99]) is got[0]
