"""Values computed once per live object: a Schedule's compiled tables and seed cuts, a
configuration's repaired splits and whole-layer levels.

Cache policy of the planning core (the service runs searches in a thread pool, so every cache
here is shared by its solver threads):

- What: values derived from one immutable object (a Schedule, a PartitionInputs) go in a
  `PerObject`; values of small immutable keys (a few ints, floats or short tuples: a split's
  layer weights, a recompute curve's parameters, a schedule's (name, pp, vpp, m)) in a
  `functools.lru_cache` with a `maxsize`. Nothing keyed by a large frozen dataclass is
  hashed per call.
- Key: `PerObject` by identity: the objects are immutable, and hashing a schedule of 10^5
  actions or a PartitionInputs of hundreds of tuples costs more than what is cached; the
  lru_caches by value.
- Bound: a `PerObject` value lives as long as its object (dropped by `weakref.finalize`,
  run as the object is freed, before its id can be reused), so it holds what the live
  searches hold; an lru_cache holds at most its `maxsize` entries.
- Threads: `PerObject.get` may build a value twice when two threads ask at once (builds are
  pure); the first stored wins and both callers get it (the store is under a lock, the build
  is not, so a long build does not block other keys). lru_cache is thread-safe in the same
  sense. A cached value is never mutated after it is returned, except where its docstring
  says it fills lazily (per-key dicts of pure values, e.g. bounds._WHOLE), where two threads
  at worst compute one entry twice.

Caches of planner/search: model._RUNS (a configuration's layer runs), paths._SEEDS (a
schedule's seed cuts), hints._RUN_OF and hints._REPAIRS (repaired splits per configuration),
bounds._WHOLE (whole-layer levels per configuration), bounds._CUT_TERMS (each path cut's
term of a configuration's cut floor, filled lazily) — PerObject; hints._split (the balanced
split of a weight tuple, 512) and bounds.integer_curve (4096) — lru_cache."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class PerObject(Generic[V]):
    """`get(obj, build)`: build() the first time for obj, the same value after."""

    def __init__(self) -> None:
        self._values: dict[int, V] = {}
        self._lock = threading.Lock()

    def get(self, obj: object, build: Callable[[], V]) -> V:
        key = id(obj)
        try:
            return self._values[key]
        except KeyError:
            pass
        value = build()  # outside the lock: pure, and may be long
        with self._lock:
            if key in self._values:  # another thread stored it first: one value for all
                return self._values[key]
            self._values[key] = value
            weakref.finalize(obj, self._values.pop, key, None)
        return value

    def __len__(self) -> int:
        return len(self._values)
