"""The start-up heap is frozen out of the cyclic collector's reach while the app runs
(`Settings.gc_freeze_on_start`, docs/service.md "Garbage collection"), and given back at
shutdown; what requests leave behind is still collected."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from fastapi.testclient import TestClient
from svc_harness import make_settings

from api.app import create_app


class _Node:
    """A tracked object that can sit in a reference cycle and be weakly referenced."""

    def __init__(self) -> None:
        self.me: _Node | None = None


def _tracked(obj: object) -> bool:
    """Whether the collector's generations (not the permanent one) hold `obj`."""
    return any(o is obj for o in gc.get_objects())


def test_start_up_heap_frozen_while_running_and_unfrozen_after(tmp_path: Path) -> None:
    before = _Node()  # alive at start-up: frozen with the rest
    app = create_app(
        make_settings(f"sqlite:///{tmp_path / 'meshplan.db'}", gc_freeze_on_start=True)
    )
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() > 10_000  # the start-up heap, not a handful of objects
        assert not _tracked(before)
        cycle = _Node()  # made after start-up, then garbage in a cycle: still collected
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0
    assert _tracked(before)


def test_freeze_off_leaves_the_collector_alone(tmp_path: Path) -> None:
    frozen_before = gc.get_freeze_count()
    app = create_app(
        make_settings(f"sqlite:///{tmp_path / 'meshplan.db'}", gc_freeze_on_start=False)
    )
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        assert gc.get_freeze_count() == frozen_before
    assert gc.get_freeze_count() == frozen_before
