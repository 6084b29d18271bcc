"""Plain-language reasons for a plan (`why`); an infeasible request: planner.search.diagnosis."""

from __future__ import annotations

from collections import Counter

from planner.search.driver import group_time_floor
from planner.search.exact import Scored
from planner.search.outcome import Entry, MemoryGroup, Outcome
from planner.search.space import Config
from planner.specs.request import PlanRequest

GIB = 1024**3
MEMORY_GROUPS = 8  # memory-pruned groups, lowest floors first, whose time floor "why" refines


def _gib(x: float) -> str:
    return f"{x / GIB:.1f} GiB"


def why(request: PlanRequest, out: Outcome, entry: Entry, sc: Scored) -> tuple[str, ...]:
    cfg, s = entry.config, sc.score
    cap = entry.inputs.cap_bytes
    lines = [
        f"Chosen: {cfg.describe()}; predicted step {s.step_time_s:.3f} s with a "
        f"{100 * s.bubble_fraction:.1f}% pipeline bubble and peak memory "
        f"{_gib(s.peak_memory_bytes)} of the {_gib(cap)} cap."
    ]
    # Memory: configurations that might have been faster but do not fit.
    tighter: list[Entry | MemoryGroup] = [
        e
        for e in out.entries
        if e.time_floor_s < s.step_time_s
        and (e.verdict == "memory" or (e.result is not None and e.result.status == "INFEASIBLE"))
    ]
    # groups pruned by memory: their whole-layer time floors (the sweep kept only the
    # layers' work) for the MEMORY_GROUPS lowest memory floors among those that may be faster
    maybe = [g for g in out.memory_groups if g.time_floor_s < s.step_time_s]
    for g in sorted(maybe, key=lambda g: g.memory_floor_bytes)[:MEMORY_GROUPS]:
        if group_time_floor(request, out, g, s.step_time_s) < s.step_time_s:
            tighter.append(g)
    if tighter:
        # the one closest to fitting: that is the limit that binds
        e = min(tighter, key=lambda e: (e.memory_floor_bytes, e.time_floor_s))
        over = e.memory_floor_bytes - cap
        detail = (
            f"exceeds the cap by at least {_gib(over)}"
            if over > 0
            else "cannot fit any stage split and recompute mix under the cap"
        )
        c = e.config
        name = (
            f"{c.degrees()} (any schedule), mbs={c.micro_batch_size}"
            + (f", ZeRO-{c.zero_stage}" if c.zero_stage else "")
            if isinstance(e, MemoryGroup)
            else c.describe()
        )
        lines.append(
            f"Memory binds: {name} could be faster (bound {e.time_floor_s:.3f} s) but {detail}."
        )
    modes = Counter(sc.partition.modes)
    if len(modes) > 1 or "none" not in modes:
        mix = ", ".join(f"{n} layers {m}" for m, n in sorted(modes.items()))
        lines.append(
            f"Recompute per layer ({mix}) trades backward time for activation memory: "
            f"{_gib(s.peak_memory_bytes - entry.inputs.fixed_bytes)} of state and activations "
            f"on the fullest rank."
        )
    if cfg.pp > 1:
        inflight = max(entry.inputs.inflight)
        lines.append(
            f"Bubble: {cfg.schedule} over pp={cfg.pp}"
            + (f" x vpp={cfg.vpp}" if cfg.vpp > 1 else "")
            + f" with m={cfg.num_microbatches} micro-batches idles "
            f"{100 * s.bubble_fraction:.1f}% of the pipeline time; more micro-batches or "
            f"virtual stages shrink it, while the first rank holds up to {inflight} "
            f"micro-batches of activations."
        )
    lines += _folded(request, cfg)
    if s.post_s > 0.02 * s.step_time_s:
        lines.append(
            f"Communication: data-parallel gradient sync and optimizer step take "
            f"{s.post_s:.3f} s ({100 * s.post_s / s.step_time_s:.0f}% of the step) at dp={cfg.dp}."
        )
    if request.objective == "bubble":
        others = sorted(
            (v for k, v in out.families.items() if k != cfg.family),
            key=lambda es: es[1].score.bubble_fraction,
        )[:2]
        for e2, sc2 in others:
            lines.append(
                f"Trade-off: {e2.config.describe()} has a {100 * sc2.score.bubble_fraction:.1f}%"
                f" bubble at {sc2.score.step_time_s:.3f} s with peak "
                f"{_gib(sc2.score.peak_memory_bytes)} (in-flight micro-batches up to "
                f"{max(e2.inputs.inflight)})."
            )
    return tuple(lines)


def _folded(request: PlanRequest, cfg: Config) -> list[str]:
    """What context and expert parallelism do in the chosen plan (docs/moe.md)."""
    lines = []
    s = request.training.seq_length
    if cfg.cp > 1:
        exchange = "a ring of p2p sends" if cfg.cp_comm == "p2p" else "an all-gather"
        lines.append(
            f"Context parallel: cp={cfg.cp} splits each {s}-token sequence into {2 * cfg.cp} "
            f"chunks, 2 per rank ({s // cfg.cp} tokens), so activations are divided by "
            f"{cfg.cp}; attention exchanges K/V by {exchange}, and cp joins dp's gradient "
            f"reduction ({cfg.cp * cfg.dp} GPUs)."
        )
    moe = request.arch.moe if request.arch is not None else None
    if moe is not None and (cfg.ep > 1 or cfg.etp > 1):
        edp = cfg.tp * cfg.cp * cfg.dp // (cfg.ep * cfg.etp)
        lines.append(
            f"Expert parallel: ep={cfg.ep} puts {moe.num_experts // cfg.ep} of the "
            f"{moe.num_experts} experts on each rank"
            + (f", each split over etp={cfg.etp}" if cfg.etp > 1 else "")
            + f"; tokens reach them by all-to-all, and each expert's weights are replicated "
            f"over edp={edp} (tp*cp*dp = {cfg.tp * cfg.cp * cfg.dp} = etp*ep*edp)."
        )
    return lines


# the fields that make a configuration (Config's, named as on Plan and Candidate)
CONFIG_FIELDS = (
    "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "schedule", "micro_batch_size", "zero_stage",
    "cp_comm",
)  # fmt: skip


def differences(chosen: Config, best: Scored, other: Config, sc: Scored) -> str:
    """How an alternative differs from the chosen plan: the fields that differ, then its
    prediction against the chosen one's."""
    changed = [
        f"{name} {getattr(chosen, name)} -> {getattr(other, name)}"
        for name in CONFIG_FIELDS
        if getattr(chosen, name) != getattr(other, name)
    ]
    a, b = best.score, sc.score
    slower = b.step_time_s / a.step_time_s - 1.0
    return (
        f"Differs from the chosen plan in {', '.join(changed) or 'its stage split'}: "
        f"step {b.step_time_s:.3f} s ({slower:+.1%}), bubble {100 * b.bubble_fraction:.1f}% "
        f"(chosen {100 * a.bubble_fraction:.1f}%), peak {_gib(b.peak_memory_bytes)}."
    )
