"""meshplan's reference runner: `-m profiler.run_plan --plan plan.json [--steps K]`.

The runner reads the Plan JSON itself, so it expresses every plan meshplan can produce.
"""

from __future__ import annotations

from planner.launch.capabilities import capabilities
from planner.launch.deployment import Deployment, LaunchFile
from planner.launch.layers import LaunchView
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan

PLAN_FILE = "plan.json"


def unsupported(v: LaunchView) -> list[str]:
    caps = capabilities("meshplan")
    reasons = []
    if v.pp > 1 and v.zero_stage not in caps.zero_stages_with_pp:
        reasons.append(
            f"zero_stage={v.zero_stage} with pp={v.pp}: the runner shards with FSDP2 only "
            f"when pp == 1; with pipeline parallel it supports ZeRO "
            f"{sorted(caps.zero_stages_with_pp)}"
        )
    return reasons


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    argv = [*entry(dep, module="profiler.run_plan", script=None), "--plan", config_dir + PLAN_FILE]
    if dep.steps is not None:
        argv += ["--steps", str(dep.steps)]
    argv += dep.entry_args
    return Trainer(
        argv=tuple(argv),
        files=(LaunchFile(name=PLAN_FILE, content=plan.model_dump_json(indent=2) + "\n"),),
    )
