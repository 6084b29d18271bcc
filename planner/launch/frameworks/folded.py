"""What each framework's capability row allows of context and expert parallelism."""

from __future__ import annotations

from planner.launch.capabilities import FrameworkCaps
from planner.launch.layers import LaunchView


def folded_reasons(v: LaunchView, caps: FrameworkCaps, *, why: dict[str, str]) -> list[str]:
    """Reasons against the plan's cp, ep and etp; `why` says, per "cp"/"ep"/"etp", the
    framework's own limit in words."""
    reasons: list[str] = []
    if v.cp > 1 and v.cp_comm not in caps.cp_comm:
        says = [f"{caps.name} exchanges K/V by {sorted(caps.cp_comm)} only"] if caps.cp_comm else []
        says += [why["cp"]] if "cp" in why else []
        reasons.append(f"cp={v.cp} with cp_comm={v.cp_comm!r}: " + "; ".join(says))
    if v.ep > 1 and not caps.expert_parallel:
        reasons.append(f"ep={v.ep}: {why.get('ep', f'{caps.name} has no expert parallelism')}")
    if v.etp > 1 and not caps.expert_tensor_parallel:
        reasons.append(
            f"etp={v.etp}: {why.get('etp', f'{caps.name} has no expert tensor parallelism')}"
        )
    return reasons
