"""Reporting for bench/fidelity_cpu.py: measured against predicted, per plan and per stage.

Errors are signed and relative: (measured - predicted) / predicted. See fidelity_cpu.py's
docstring for what each field means.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, replace

from planner.plan import Plan
from planner.runreport import RunReport
from planner.specs.model import ModelProfile


@dataclass(frozen=True)
class StageRow:
    stage: int
    rank: int
    predicted_busy_s: float  # the stage's rank, per step (simulator)
    measured_busy_s: float
    busy_error: float
    predicted_activation_bytes: float
    measured_activation_bytes: float
    activation_error: float
    predicted_peak_bytes: float
    measured_peak_bytes: float
    peak_error: float


@dataclass(frozen=True)
class RunRow:
    label: str
    ranks: int
    schedule: str
    pp: int
    dp: int
    tp: int
    vpp: int
    microbatches: int
    predicted_step_time_s: float
    measured_step_time_s: float
    step_time_error: float
    step_time_spread: float  # (max - min) / median over repeats
    compute_speed_ratio: float  # sum of measured busy / sum of predicted busy, over ranks
    compute_cpu_ratio: float | None  # the same with the busy calls' thread CPU time
    contention: float | None  # busy wall time / busy CPU time: slowdown by other processes
    step_time_error_speed_adjusted: float  # vs the prediction x compute_speed_ratio
    repeat_step_times_s: list[float]
    predicted_bubble: float
    measured_bubble: float
    bubble_error: float | None  # relative; None when the predicted bubble is 0 (pp = 1)
    bubble_error_abs: float  # measured - predicted, both fractions of the pipeline time
    memory_error: float
    worst_stage: int
    peak_memory_error: float
    load_average: list[float]  # 1-minute load average before each repeat (2 cores)
    busy_cores_before: list[float]  # cores busy (other work) in the second before each repeat
    contention_factor: float  # the profile's times were scaled by this (1: measured alone)
    busy_cores_before_contention: float | None  # other work when the factor was measured
    contention_note: str  # how the factor was measured (profiler.contention), "" if not
    links: dict[str, float]  # the ClusterSpec link figures planned with (empty: catalog)
    stages: list[StageRow]
    # the profile's per-action overhead the plan was made with (F, B, I, W), microseconds
    action_overhead_us: dict[str, float] | None = None
    # per repeat: the host's fw+bw time alone right before the run / right after profiling
    # (bench/fidelity_cpu.py speed_probe; a diagnostic, nothing is scaled by it)
    host_slowdown: list[float] | None = None
    # with --reprofile: each repeat's own prediction (profile and contention factor measured
    # right before that run); the errors above are then medians of the per-repeat errors
    repeat_predicted_s: list[float] | None = None
    repeat_factors: list[float] | None = None


def factor_of(prof: ModelProfile) -> float:
    return float(prof.notes.get("contention_factor", "1"))


def _busy_note(prof: ModelProfile | None) -> float | None:
    value = None if prof is None else prof.notes.get("busy_cores_before_contention")
    return None if value is None else float(value)


def _rel(measured: float, predicted: float) -> float:
    return (measured - predicted) / predicted if predicted else float("nan")


def compare_repeats(
    label: str,
    plans: list[Plan],
    profiles: list[ModelProfile],
    reports: list[RunReport],
    loads: list[float],
    links: dict[str, float] | None = None,
    busy_before: list[float] | None = None,
) -> RunRow:
    """Each repeat against its own prediction (`plans[k]` made from `profiles[k]`, measured
    right before run k): step-time errors, busy ratios and the error at the measured speed are
    the medians of the per-repeat values; the stage rows and memory are those of the repeat
    whose prediction is the median one (memory does not depend on the host's speed)."""
    rows = [
        compare(label, p, [r], [ld], links, pr, None)
        for p, pr, r, ld in zip(plans, profiles, reports, loads, strict=True)
    ]
    order = sorted(range(len(rows)), key=lambda k: rows[k].predicted_step_time_s)
    mid = order[len(order) // 2]
    base = compare(label, plans[mid], reports, loads, links, profiles[mid], busy_before)
    cpu = [r.compute_cpu_ratio for r in rows]
    cpu_ratio = None if any(x is None for x in cpu) else statistics.median(x or 0.0 for x in cpu)
    speed = statistics.median(r.compute_speed_ratio for r in rows)
    bubble = statistics.median(r.predicted_bubble for r in rows)
    factors = [r.contention_factor for r in rows]
    busy_c = [r.busy_cores_before_contention for r in rows]
    return replace(
        base,
        predicted_step_time_s=statistics.median(r.predicted_step_time_s for r in rows),
        step_time_error=statistics.median(r.step_time_error for r in rows),
        compute_speed_ratio=speed,
        compute_cpu_ratio=cpu_ratio,
        contention=speed / cpu_ratio if cpu_ratio else None,
        step_time_error_speed_adjusted=statistics.median(
            r.step_time_error_speed_adjusted for r in rows
        ),
        predicted_bubble=bubble,
        bubble_error_abs=base.measured_bubble - bubble,
        contention_factor=statistics.median(factors),
        busy_cores_before_contention=None
        if any(x is None for x in busy_c)
        else max(x or 0.0 for x in busy_c),
        repeat_predicted_s=[r.predicted_step_time_s for r in rows],
        repeat_factors=factors,
    )


def compare(
    label: str,
    plan: Plan,
    reports: list[RunReport],
    loads: list[float],
    links: dict[str, float] | None = None,
    plan_profile: ModelProfile | None = None,
    busy_before: list[float] | None = None,
) -> RunRow:
    """Measured against predicted; `plan_profile` is the profile the plan was made from."""
    pred = plan.prediction
    rank_busy = {r.rank: r.busy_s for r in pred.ranks}
    steps = [r.step_time_s for r in reports]
    step = statistics.median(steps)
    bubble = statistics.median(r.bubble_fraction for r in reports)
    rank_total = {r.rank: r.total_bytes for r in pred.ranks}
    rows: list[StageRow] = []
    for sp in pred.stages:
        act = statistics.median(r.stages[sp.stage].activation_bytes for r in reports)
        peak = statistics.median(r.stages[sp.stage].peak_memory_bytes for r in reports)
        busy = statistics.median(r.stages[sp.stage].busy_s for r in reports)
        rows.append(
            StageRow(
                stage=sp.stage,
                rank=sp.rank,
                predicted_busy_s=rank_busy[sp.rank],
                measured_busy_s=busy,
                busy_error=_rel(busy, rank_busy[sp.rank]),
                predicted_activation_bytes=sp.activation_bytes,
                measured_activation_bytes=act,
                activation_error=_rel(act, sp.activation_bytes),
                predicted_peak_bytes=rank_total[sp.rank],
                measured_peak_bytes=peak,
                peak_error=_rel(peak, rank_total[sp.rank]),
            )
        )
    speed = sum(
        statistics.median(r.stages[sp.stage].busy_s for r in reports)
        for sp in pred.stages
        if sp.stage == min(x.stage for x in pred.stages if x.rank == sp.rank)
    ) / sum(r.busy_s for r in pred.ranks)
    cpu_notes = [r.notes.get("busy_cpu_s") for r in reports]
    cpu_ratio = contention = None
    if all(cpu_notes):
        cpu_busy = statistics.median(sum(float(x) for x in n.split(",")) for n in cpu_notes if n)
        cpu_ratio = cpu_busy / sum(r.busy_s for r in pred.ranks)
        contention = speed / cpu_ratio if cpu_ratio else None
    worst = max(rows, key=lambda r: abs(r.activation_error))
    worst_peak = max(rows, key=lambda r: abs(r.peak_error))
    return RunRow(
        label=label,
        ranks=plan.num_gpus,
        schedule=plan.schedule,
        pp=plan.pp,
        dp=plan.dp,
        tp=plan.tp,
        vpp=plan.vpp,
        microbatches=plan.num_microbatches,
        predicted_step_time_s=pred.step_time_s,
        measured_step_time_s=step,
        step_time_error=_rel(step, pred.step_time_s),
        step_time_spread=(max(steps) - min(steps)) / step,
        compute_speed_ratio=speed,
        compute_cpu_ratio=cpu_ratio,
        contention=contention,
        step_time_error_speed_adjusted=_rel(step, pred.step_time_s * speed),
        repeat_step_times_s=steps,
        predicted_bubble=pred.bubble_fraction,
        measured_bubble=bubble,
        bubble_error=_rel(bubble, pred.bubble_fraction) if pred.bubble_fraction > 0 else None,
        bubble_error_abs=bubble - pred.bubble_fraction,
        memory_error=worst.activation_error,
        worst_stage=worst.stage,
        peak_memory_error=worst_peak.peak_error,
        load_average=loads,
        busy_cores_before=busy_before or [],
        contention_factor=factor_of(plan_profile) if plan_profile is not None else 1.0,
        busy_cores_before_contention=_busy_note(plan_profile),
        contention_note="" if plan_profile is None else plan_profile.notes.get("contention", ""),
        links=links or {},
        stages=rows,
        action_overhead_us=None
        if plan_profile is None
        else {
            k: round(getattr(plan_profile.action_overhead_s, f"{k.lower()}_s") * 1e6, 2)
            for k in ("F", "B", "I", "W")
        },
    )


def _mib(x: float) -> str:
    return f"{x / 2**20:7.2f}"


def print_table(rows: list[RunRow]) -> None:
    for r in rows:
        print(f"\n{r.label}  ({r.schedule}, pp={r.pp} dp={r.dp} vpp={r.vpp}, m={r.microbatches})")
        print(
            f"  step time  predicted {r.predicted_step_time_s * 1e3:8.1f} ms  measured "
            f"{r.measured_step_time_s * 1e3:8.1f} ms  error {r.step_time_error:+7.1%}  "
            f"(spread over repeats {r.step_time_spread:.1%}: "
            + ", ".join(f"{t * 1e3:.0f}" for t in r.repeat_step_times_s)
            + f" ms; load average {', '.join(str(x) for x in r.load_average)}; cores busy "
            f"before {', '.join(str(x) for x in r.busy_cores_before)})"
        )
        print(
            f"  profile    times x{r.contention_factor:.3f} "
            f"({r.contention_note or 'the profile measured alone'})"
        )
        cpu = (
            ""
            if r.compute_cpu_ratio is None
            else (
                f" (in thread CPU time {r.compute_cpu_ratio:.2f}: other processes slowed compute "
                f"x{r.contention:.2f})"
            )
        )
        print(
            f"  compute    measured busy / predicted busy {r.compute_speed_ratio:.2f}{cpu}; step "
            f"time error at the measured compute speed {r.step_time_error_speed_adjusted:+.1%}"
        )
        print(
            f"  bubble     predicted {r.predicted_bubble:8.3f}     measured "
            f"{r.measured_bubble:8.3f}     error {r.bubble_error_abs:+7.3f} (absolute), "
            + ("n/a (relative)" if r.bubble_error is None else f"{r.bubble_error:+.1%} (relative)")
        )
        print(
            "  stage rank  busy pred ms  busy meas ms   error  act pred MiB  act meas MiB   error"
            "   peak pred MiB  peak meas MiB  error"
        )
        for s in r.stages:
            print(
                f"  {s.stage:5d} {s.rank:4d}  {s.predicted_busy_s * 1e3:12.1f} "
                f"{s.measured_busy_s * 1e3:13.1f} {s.busy_error:+7.1%} "
                f"{_mib(s.predicted_activation_bytes):>13s} "
                f"{_mib(s.measured_activation_bytes):>13s} {s.activation_error:+7.1%} "
                f"{_mib(s.predicted_peak_bytes):>15s} {_mib(s.measured_peak_bytes):>14s} "
                f"{s.peak_error:+7.1%}"
            )


def progress(
    k: int, repeats: int, label: str, plan: Plan, rep: RunReport, load: float, busy: float
) -> None:
    """One line per run on stderr: predicted vs measured step time, bubble and each stage's
    saved-activation bytes (MiB), each with its signed relative error."""
    pred = plan.prediction
    acts = " ".join(
        f"{sp.stage}: {sp.activation_bytes / 2**20:.2f}->"
        f"{rep.stages[sp.stage].activation_bytes / 2**20:.2f} "
        f"({_rel(rep.stages[sp.stage].activation_bytes, sp.activation_bytes):+.2%})"
        for sp in pred.stages
    )
    bub = (
        f"{_rel(rep.bubble_fraction, pred.bubble_fraction):+.1%}"
        if pred.bubble_fraction > 0
        else "n/a"
    )
    print(
        f"[{k + 1}/{repeats}] {label}: step {pred.step_time_s * 1e3:.1f} -> "
        f"{rep.step_time_s * 1e3:.1f} ms ({_rel(rep.step_time_s, pred.step_time_s):+.1%}), "
        f"bubble {pred.bubble_fraction:.3f} -> {rep.bubble_fraction:.3f} ({bub}), "
        f"activations MiB by stage {acts}; load {load}, cores busy before {busy}",
        file=sys.stderr,
        flush=True,
    )


def markdown(rows: list[RunRow]) -> str:
    """The docs/runner.md table: one row per plan."""
    out = [
        "| plan | profile × (cores busy) | step pred → meas (ms) | error | spread | busy / pred "
        "| busy CPU / pred | error at meas. speed | host slowdown before runs "
        "| bubble pred → meas | activation error (stage) | peak error | load avg "
        "| cores busy before |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.label} ({r.schedule} pp{r.pp} dp{r.dp} vpp{r.vpp} m{r.microbatches}) | "
            + (
                ", ".join(f"{x:.2f}" for x in r.repeat_factors)
                if r.repeat_factors
                else f"{r.contention_factor:.2f}"
            )
            + (
                ""
                if r.busy_cores_before_contention is None
                else f" ({r.busy_cores_before_contention:.1f})"
            )
            + f" | {r.predicted_step_time_s * 1e3:.0f} → "
            f"{r.measured_step_time_s * 1e3:.0f} | {r.step_time_error:+.1%} | "
            f"{r.step_time_spread:.1%} | {r.compute_speed_ratio:.2f} | "
            + ("–" if r.compute_cpu_ratio is None else f"{r.compute_cpu_ratio:.2f}")
            + f" | {r.step_time_error_speed_adjusted:+.1%} | "
            + (", ".join(f"{x:.2f}" for x in r.host_slowdown) if r.host_slowdown else "–")
            + f" | {r.predicted_bubble:.3f} → {r.measured_bubble:.3f} | "
            f"{r.memory_error:+.2%} ({r.worst_stage}) | {r.peak_memory_error:+.1%} | "
            f"{', '.join(f'{x:.1f}' for x in r.load_average)} | "
            f"{', '.join(f'{x:.1f}' for x in r.busy_cores_before)} |"
        )
    return "\n".join(out).replace("%", " %") + "\n"


def summary(rows: list[RunRow]) -> None:
    print(
        "\nsummary: label, profile contention factor, step error, spread, busy ratio, step error "
        "at measured speed, bubble error, worst activation error"
    )
    for r in rows:
        print(
            f"  {r.label:36s} x{r.contention_factor:4.2f} {r.step_time_error:+7.1%}  "
            f"±{r.step_time_spread:5.1%}  "
            f"x{r.compute_speed_ratio:4.2f}  {r.step_time_error_speed_adjusted:+7.1%}  "
            f"{r.bubble_error_abs:+6.3f}  {r.memory_error:+6.1%} (stage {r.worst_stage})"
        )
