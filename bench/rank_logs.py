"""Each rank's own output of a torchrun launch, and the first error in it.

`torchrun --log-dir DIR --redirects 3` writes every local rank's stdout and stderr to
`DIR/<run id>/attempt_<k>/<local rank>/{stdout,stderr}.log`. When a run fails, the rank that
failed first usually says why in its first traceback, while the others only report that a
peer closed the connection; the tail of the interleaved output hides the cause. So the
benches print each rank's first error instead.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["describe_failure", "first_error", "first_errors", "log_args"]

_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*")
_RANK_PREFIX = re.compile(r"^\[(default)?rank\d+\]: ?")  # torch prefixes a rank's tracebacks
_SECTION_END = (
    "Traceback (most recent call last):",
    "The above exception was the direct cause",
    "During handling of the above exception",
)


def log_args(directory: Path) -> list[str]:
    """torchrun options that keep every rank's stdout and stderr in files under `directory`."""
    return ["--log-dir", str(directory), "--redirects", "3"]


def first_error(text: str, *, max_chars: int = 1200) -> str | None:
    """The first exception in a process's stderr: its innermost frame and its message (with
    the message's continuation lines), or None when the text holds no traceback."""
    lines = [_RANK_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith(_SECTION_END[0]))
    except StopIteration:
        return None
    frame = ""
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.startswith("  File "):
            frame = line.strip()
            continue
        if line.startswith(" ") or not line.strip():
            continue
        if not _EXCEPTION.match(line):
            continue
        message = [line]
        for more in lines[i + 1 :]:
            if more.startswith(_SECTION_END) or not more.strip():
                break
            message.append(more.rstrip())
        out = "\n".join(([frame] if frame else []) + message)
        return out if len(out) <= max_chars else out[:max_chars] + " ..."
    return None


def first_errors(directory: Path) -> dict[int, str]:
    """Local rank -> its first error, for every rank whose stderr (latest attempt) has one."""
    out: dict[int, str] = {}
    for log in sorted(directory.glob("*/attempt_*/*/stderr.log")):
        if not log.parent.name.isdigit():
            continue
        error = first_error(log.read_text(errors="replace"))
        if error is not None:
            out[int(log.parent.name)] = error
    return dict(sorted(out.items()))


def describe_failure(directory: Path, *, returncode: int, stderr: str, what: str) -> str:
    """One message for a failed launch: each rank's first error, or torchrun's own tail."""
    errors = first_errors(directory)
    if not errors:
        return f"{what} failed (exit {returncode}), no rank logged a traceback:\n{stderr[-2000:]}"
    body = "\n".join(f"  rank {r}: {e}".replace("\n", "\n    ") for r, e in errors.items())
    return f"{what} failed (exit {returncode}); each rank's first error:\n{body}"
