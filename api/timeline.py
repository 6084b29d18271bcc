"""A plan's pipeline timeline, drawn one way for the service (`/v1/plans/{id}/timeline.svg`,
the plan page) and the CLI (`meshplan plan --svg`): regenerate its schedule, simulate it with
the plan's predicted per-stage times (no re-scoring), draw it (the planner's renderer)."""

from __future__ import annotations

from planner.plan import Plan
from planner.schedules import generate, render_timeline_svg, simulate
from planner.schedules.sim_types import StageDurations


def plan_timeline_svg(plan: Plan) -> str:
    stages = sorted(plan.prediction.stages, key=lambda s: s.stage)
    durations = StageDurations(
        fw_s=tuple(s.fw_s for s in stages),
        bw_s=tuple(s.bw_s for s in stages),
        w_s=tuple(s.bw_weight_s for s in stages),
        p2p_s=tuple(s.p2p_s for s in stages),
    )
    schedule = generate(
        plan.schedule, pp=plan.pp, vpp=plan.vpp, num_microbatches=plan.num_microbatches
    )
    sim = simulate(schedule, durations)
    title = (
        f"{plan.model_name}: {plan.schedule}, pp={plan.pp} vpp={plan.vpp} m={plan.num_microbatches}"
    )
    return render_timeline_svg(schedule, sim, title=title)
