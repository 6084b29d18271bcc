"""What the golden launch tests share: where the golden files are and the text a bundle is
compared as."""

from __future__ import annotations

from pathlib import Path

from planner.launch import LaunchBundle

# the golden files of the launch tests
GOLDEN = Path(__file__).parent / "golden"


def flatten(bundle: LaunchBundle) -> str:
    """A launch bundle as one text, the form of the golden files: each file with its mode,
    then the commands, then the notes."""
    parts = []
    for f in bundle.files:
        parts.append(f"=== file {f.name} (mode {f.mode:o}) ===\n{f.content.rstrip()}\n")
    parts.append("=== commands ===\n" + "\n".join(bundle.commands) + "\n")
    parts.append("=== notes ===\n" + "\n".join(bundle.notes) + "\n")
    return "\n".join(parts)
