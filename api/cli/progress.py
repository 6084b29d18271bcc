"""Progress of long commands on stderr: shown to a person at a terminal, silent when piped.

`progress_bar(label, as_json=...)` yields an `on_progress(fraction)` callback (the form
`planner.search.search` and the profiler report in) that draws a transient rich bar on stderr
when `stderr_is_terminal()` and the command has no --json, and does nothing otherwise; the
bar is removed when the block ends, so the terminal keeps only the result.
`search_progress(as_json=...)` does the same for `planner.search.search`'s
`on_progress(SearchProgress)`: one live line of configurations settled of the total, the
incumbent's step time, the proven lower bound and the gap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.search.progress import SearchProgress

# Resolution of the bar: fractions are reported as a count out of this many steps.
STEPS = 1000


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal a person watches (not a pipe, a file or TERM=dumb)."""
    return sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb"


def show_progress(*, as_json: bool, requested: bool | None = None) -> bool:
    """Whether to draw progress: as `requested` (--progress/--no-progress) when given, else on
    a terminal only; never with --json."""
    if as_json:
        return False
    return stderr_is_terminal() if requested is None else requested


def _ignore(fraction: float) -> None:
    del fraction


@contextmanager
def progress_bar(
    label: str, *, as_json: bool, requested: bool | None = None
) -> Iterator[Callable[[float], None]]:
    """An `on_progress(fraction in [0, 1])` callback drawing `label`'s bar (see module doc)."""
    if not show_progress(as_json=as_json, requested=requested):
        yield _ignore
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(label, total=STEPS)

    def on_progress(fraction: float) -> None:
        bar.update(task, completed=round(min(max(fraction, 0.0), 1.0) * STEPS))

    with bar:
        yield on_progress


def search_line(p: SearchProgress) -> str:
    """The live line's text after `searching`, e.g. `12/40 configurations settled, best
    1.234 s, bound 1.200 s, gap 2.83%`."""
    parts = [f"{p.settled}/{p.total} configurations settled"]
    if p.incumbent_s is not None:
        parts.append(f"best {p.incumbent_s:.4g} s")
    if p.lower_bound_s is not None:
        parts.append(f"bound {p.lower_bound_s:.4g} s")
    if p.gap is not None:
        parts.append(f"gap {p.gap:.2%}")
    return ", ".join(parts)


def _ignore_search(progress: SearchProgress) -> None:
    del progress


@contextmanager
def search_progress(
    *, as_json: bool, requested: bool | None = None
) -> Iterator[Callable[[SearchProgress], None]]:
    """An `on_progress(SearchProgress)` callback drawing the search's live line on stderr
    (only where show_progress says so; removed when the block ends)."""
    if not show_progress(as_json=as_json, requested=requested):
        yield _ignore_search
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("searching"),
        BarColumn(bar_width=20),
        TaskProgressColumn(),
        TextColumn("{task.fields[line]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("searching", total=STEPS, line="")

    def on_progress(progress: SearchProgress) -> None:
        done = round(min(max(progress.fraction, 0.0), 1.0) * STEPS)
        bar.update(task, completed=done, line=search_line(progress))

    with bar:
        yield on_progress
