"""meshplan's reference runner: `-m profiler.run_plan --plan plan.json [--steps K]`.

The runner reads the Plan JSON itself, so it expresses every plan meshplan can produce.
"""

from __future__ import annotations

from planner.launch.capabilities import capabilities
from planner.launch.deployment import Deployment, LaunchFile
from planner.launch.frameworks.folded import folded_reasons
from planner.launch.layers import LaunchView
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan

PLAN_FILE = "plan.json"


def unsupported(v: LaunchView) -> list[str]:
    """What the runner cannot run, as its tests show (tests/profiler/test_runner_property.py,
    bench/runner_property.py): the capability row, and the micro-batch counts torch's schedule
    classes refuse (the runner runs them unchanged)."""
    caps = capabilities("meshplan")
    reasons = []
    if v.pp > 1 and v.zero_stage not in caps.zero_stages_with_pp:
        reasons.append(
            f"zero_stage={v.zero_stage} with pp={v.pp}: with pipeline parallel the runner is "
            f"tested with ZeRO {sorted(caps.zero_stages_with_pp)} only (plans never pair "
            f"ZeRO 2/3 with pp > 1)"
        )
    m = v.num_microbatches
    if m is not None and v.pp > 1:
        reasons += _schedule_microbatches(v.schedule, pp=v.pp, m=m)
    reasons += folded_reasons(v, caps, why=_WHY)
    if (v.cp > 1 or v.ep > 1) and (v.tp > 1 or v.zero_stage > 0):
        reasons.append(
            f"cp={v.cp}, ep={v.ep} with tp={v.tp}, zero_stage={v.zero_stage}: the runner runs "
            f"context and expert parallelism with tp=1 and ZeRO-0 only "
            f"(tests/profiler/test_run_plan_ep_cp.py)"
        )
    return reasons


_WHY = {
    "cp": "the runner's RingAttention (profiler/runner/context.py) passes K/V round a ring",
    "etp": "the runner's experts are whole on each ep rank (profiler/runner/expert.py)",
}


def _schedule_microbatches(schedule: str, *, pp: int, m: int) -> list[str]:
    """torch.distributed.pipelining's checks on the micro-batch count (torch 2.13)."""
    if schedule == "1f1b" and m < pp:
        # Schedule1F1B.__init__: n_microbatches >= number of stages
        return [f"num_microbatches={m} with 1f1b and pp={pp}: torch's Schedule1F1B needs m >= pp"]
    rounds = max(1, m // pp)
    looped = {
        "zb-h1": "ScheduleInterleavedZeroBubble",
        "interleaved-1f1b": "ScheduleInterleaved1F1B",
    }
    if schedule in looped and m % rounds:
        # their __init__: m a multiple of the rounds, max(1, m // pp)
        return [
            f"num_microbatches={m} with {schedule} and pp={pp}: torch's {looped[schedule]} "
            f"needs m to be a multiple of max(1, m // pp) = {rounds}"
        ]
    return []


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    argv = [*entry(dep, module="profiler.run_plan", script=None), "--plan", config_dir + PLAN_FILE]
    if dep.steps is not None:
        argv += ["--steps", str(dep.steps)]
    argv += dep.entry_args
    return Trainer(
        argv=tuple(argv),
        files=(LaunchFile(name=PLAN_FILE, content=plan.model_dump_json(indent=2) + "\n"),),
    )
