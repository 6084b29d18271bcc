"""GPU names as people write them, mapped to the catalog's names.

`A100`, `A100-80GB`, `a100 sxm 80gb` and `A100-SXM-80GB` are one GPU: a name is split into
lower-case words at spaces, hyphens and underscores, and it names the catalog entries whose
words include all of its words (the catalog's own aliases are tried first). One entry: that
name. Several: ambiguous, and the error lists them, so that equal GPUs share one cache key and
one history instead of splitting by spelling.
"""

from __future__ import annotations

import re

from planner.catalog.hardware import ALIASES, GPUS

_SEPARATORS = re.compile(r"[\s_\-]+")


def _words(name: str) -> frozenset[str]:
    return frozenset(w for w in _SEPARATORS.split(name.strip().lower()) if w)


def gpu_candidates(name: str) -> list[str]:
    """The catalog names that `name` can mean, sorted."""
    if name in GPUS:
        return [name]
    if name in ALIASES:
        return [ALIASES[name]]
    words = _words(name)
    if not words:
        return []
    return sorted(g for g in GPUS if words <= _words(g))


def canonical_gpu(name: str) -> str:
    """The catalog's name for `name`; ValueError listing the candidates (ambiguous) or the
    known names (unknown)."""
    found = gpu_candidates(name)
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"GPU {name!r} is ambiguous: it matches {', '.join(found)}")
    raise ValueError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}")
