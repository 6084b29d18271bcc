"""What the plan page compares: how an alternative differs from the chosen plan, and which
frameworks can launch a plan (with the one-line reason for each that cannot)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.refusal import summarise
from planner.launch.render import FRAMEWORKS, TARGETS, unsupported
from planner.plan import Plan

# (label, attribute) of what a configuration fixes, in the order the comparison names them
KNOBS: tuple[tuple[str, str], ...] = (
    ("tp", "tp"),
    ("pp", "pp"),
    ("dp", "dp"),
    ("vpp", "vpp"),
    ("schedule", "schedule"),
    ("mbs", "micro_batch_size"),
    ("ZeRO", "zero_stage"),
    ("sequence parallel", "sequence_parallel"),
    ("recompute", "recompute"),
)


def knob_value(plan: Plan, attr: str) -> str:
    value = getattr(plan, attr)
    if attr == "sequence_parallel":
        return "on" if value else "off"
    if attr == "recompute" and value == "mixed":
        return "mixed (" + ", ".join(f"{n} {m}" for m, n in plan.recompute_blocks.items()) + ")"
    return str(value)


def differences(chosen: Plan, other: Plan) -> list[str]:
    """What `other` sets differently, e.g. ['tp 2 → 4', 'schedule 1f1b → gpipe'], then its
    step time and peak memory relative to the chosen plan's."""
    out = [
        f"{label} {knob_value(chosen, attr)} → {knob_value(other, attr)}"
        for label, attr in KNOBS
        if knob_value(chosen, attr) != knob_value(other, attr)
    ]
    if not out and chosen.stages != other.stages:
        out.append("another stage split")
    a, b = chosen.prediction, other.prediction
    out.append(f"step time {_rel(b.step_time_s, a.step_time_s)}")
    out.append(f"peak memory {_rel(b.peak_memory_bytes, a.peak_memory_bytes)}")
    return out


def _rel(value: float, base: float) -> str:
    return "±0%" if base == 0 or value == base else f"{(value - base) / base:+.1%}"


@dataclass(frozen=True)
class LaunchOption:
    framework: str
    links: tuple[tuple[str, str], ...]  # (target, URL)
    reason: str | None  # why it cannot run the plan, one line; None when it can


def launch_options(plan: Plan, plan_id: str) -> list[LaunchOption]:
    """Every framework of the launch emitters: links per target, or the first kind of reason
    it cannot run the plan (api.refusal's summary), with how many kinds there are."""
    out = []
    for fw in FRAMEWORKS:
        reasons = unsupported(plan, fw)
        if not reasons:
            links = tuple(
                (t, f"/v1/plans/{plan_id}/launch?target={t}&framework={fw}") for t in TARGETS
            )
            out.append(LaunchOption(fw, links, None))
            continue
        summary: dict[str, Any] = summarise(fw, reasons, pp=plan.pp)
        first = summary["reasons"][0]
        more = len(summary["reasons"]) - 1
        line = f"{first['example']} (fix: {first['fix']})"
        if more:
            line += f"; and {more} other kind(s) of reason"
        out.append(LaunchOption(fw, (), line))
    return out
