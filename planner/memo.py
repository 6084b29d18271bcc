"""Values computed once per live object: a Schedule's compiled tables and seed cuts, a
configuration's repaired splits.

Keyed by identity (the objects are immutable, and hashing a schedule of 10^5 actions or a
PartitionInputs of hundreds of tuples costs more than what is cached), each value dropped when
its object is collected (`weakref.finalize`, run as the object is freed, before its id can be
reused)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class PerObject(Generic[V]):
    """`get(obj, build)`: build() the first time for obj, the same value after."""

    def __init__(self) -> None:
        self._values: dict[int, V] = {}

    def get(self, obj: object, build: Callable[[], V]) -> V:
        key = id(obj)
        if key in self._values:
            return self._values[key]
        value = self._values[key] = build()
        weakref.finalize(obj, self._values.pop, key, None)
        return value

    def __len__(self) -> int:
        return len(self._values)
