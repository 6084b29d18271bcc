"""Why a framework cannot express a plan, short: one line per kind of reason, with a count,
one example and the request constraint that makes the search avoid it.

`planner.launch.unsupported` gives every reason precisely (a 96-stage plan can give one per
stage: kilobytes); a user needs to know what kind of thing cannot be expressed and how to get
a plan that can. Reasons are sorted into kinds by the words they use (below); one no rule
matches is kind "other". Whatever the kinds, a search with `constraints.framework` set to the
framework returns a plan it can express (the search honours the capability table).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from planner.launch.capabilities import CAPABILITIES, FrameworkCaps

EXAMPLE_CHARS = 320  # an example reason is cut there

# (kind, words of which one marks it), first match wins: the micro-batch reason names the
# interleaved schedule, and per-stage recompute reasons name their stage
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model_shapes", ("(arch)", "model shapes")),
    ("sequence_parallel", ("sequence_parallel",)),
    ("zero_stage", ("zero_stage",)),
    ("micro_batches", ("num_microbatches",)),
    ("batch", ("batch_size",)),
    ("recompute", ("recompute",)),
    ("schedule", ("schedule '",)),
    ("tensor_parallel", ("num_attention_heads",)),
    ("stage_split", ("stage", "pipeline rank", "embedding")),
)


def reason_kind(reason: str) -> str:
    text = reason.lower()
    for kind, words in _KINDS:
        if any(w in text for w in words):
            return kind
    return "other"


def _fix_recompute(caps: FrameworkCaps, pp: int | None) -> str:
    modes = [m for m in ("none", "selective", "full") if m in caps.recompute_modes]
    fix = "constraints.uniform_recompute: true"
    if "selective" not in caps.recompute_modes:
        fix += f" and constraints.recompute: {json.dumps(modes)}"
    return fix


def _fix_zero(caps: FrameworkCaps, pp: int | None) -> str:
    if pp is None:
        return f'constraints.framework: "{caps.name}"'
    stages = caps.zero_stages_with_pp if pp > 1 else caps.zero_stages
    return f"constraints.zero_stages: {json.dumps(sorted(stages))}"


def _fix_schedule(caps: FrameworkCaps, pp: int | None) -> str:
    names = sorted(caps.schedules)
    return f"constraints.schedules: {json.dumps(names)}" + (
        ", constraints.vpp: [1]" if caps.max_vpp == 1 else ""
    )


_FIXES: dict[str, Callable[[FrameworkCaps, int | None], str]] = {
    "recompute": _fix_recompute,
    "zero_stage": _fix_zero,
    "schedule": _fix_schedule,
    "sequence_parallel": lambda caps, pp: "constraints.sequence_parallel: false",
    "model_shapes": lambda caps, pp: (
        "a request with the model's shapes (model.family ...), not only a profile"
    ),
}


def summarise(framework: str, reasons: Sequence[str], *, pp: int | None = None) -> dict[str, Any]:
    """`{"detail", "reasons": [{"kind", "count", "example", "fix"}], "fix"}` for a problem
    document (`pp`: the plan's, when known, for the ZeRO stages it allows); the top-level
    `fix` is the change to the plan request that gets an expressible plan."""
    caps = CAPABILITIES.get(framework)
    kinds: dict[str, list[str]] = {}
    for reason in reasons:
        kinds.setdefault(reason_kind(reason), []).append(reason)
    search_fix = f'constraints.framework: "{framework}"'
    lines = []
    for kind, members in kinds.items():
        example = members[0]
        if len(example) > EXAMPLE_CHARS:
            example = example[: EXAMPLE_CHARS - 1] + "…"
        fix = _FIXES[kind](caps, pp) if caps is not None and kind in _FIXES else search_fix
        lines.append({"kind": kind, "count": len(members), "example": example, "fix": fix})
    names = ", ".join(f"{k} ({len(v)})" for k, v in kinds.items())
    detail = (
        f"{framework} cannot express this plan: {len(reasons)} reason(s), by kind {names}; "
        f"plan with {search_fix} to get one it can"
    )
    return {"detail": detail, "reasons": lines, "fix": {"constraints": {"framework": framework}}}


def one_line(summary: dict[str, Any]) -> str:
    """The summary as one line (the CLI's message)."""
    kinds = "; ".join(
        f"{r['kind']} x{r['count']}: {r['example']} (fix: {r['fix']})" for r in summary["reasons"]
    )
    return f"{summary['detail']}. {kinds}"
