"""Which limit binds when the search finds no plan, by how much, and what would lift it.

In the order checked:
- `constraints`: no configuration passes the request's constraints and the cost model's checks;
- `stage_split`: the framework's stage split (capabilities: "uniform" = equal decoder layers on
  every stage) exists for none of the configurations (e.g. DeepSpeed with 30 decoder layers
  and pp = 4);
- `memory`: the least peak memory of any configuration, with least-memory recompute on every
  layer and the framework's stage split, exceeds the cap;
- `time_limit`: some configuration fits under the cap, but the search ran out of time before
  it found a plan. (`unexplained` if it did not run out of time: a bug to report.)
"""

from __future__ import annotations

import json
from typing import Any

from planner.launch.capabilities import CAPABILITIES
from planner.search.driver import memory_rep
from planner.search.hints import hint_partitions, min_memory
from planner.search.model import StageSplit
from planner.search.outcome import Entry, MemoryGroup, Outcome
from planner.search.partition import Partition, score
from planner.search.space import Config, main_run, split_ok, stage_split
from planner.specs.request import PlanRequest

GIB = 1024**3
POOL = 8  # configurations, lowest memory floors first, whose least peak memory is computed


def diagnose(request: PlanRequest, out: Outcome) -> dict[str, Any]:
    """The diagnosis of an infeasible search (module docstring): `binding`, `message`,
    `suggestions` and the numbers of the binding limit."""
    split = stage_split(request)
    cap = float(request.memory_cap_bytes)
    pool = _pool(request, out, split)
    if not pool:
        if split != "any" and (out.entries or out.memory_groups):
            return _split_binds(request, out, split)
        return {
            "binding": "constraints",
            "message": "no configuration satisfies the request's constraints "
            f"({out.invalid} were rejected by the cost model's checks)",
            "suggestions": [
                "relax constraints.tp / cp / pp / dp / ep / etp / schedules / micro_batch_sizes"
            ],
        }
    peaks = [(p, e) for e in pool if (p := least_peak(e, split)) is not None]
    if not peaks:
        return _split_binds(request, out, split)
    best_peak, best = min(peaks, key=lambda pe: pe[0])
    if best_peak > cap:
        return _memory_binds(request, out, best, best_peak, min(e.memory_floor_bytes for e in pool))
    return _time_binds(request, out, best, best_peak)


def _pool(request: PlanRequest, out: Outcome, split: StageSplit) -> list[Entry]:
    """Up to POOL configurations that admit the stage split, lowest memory floors first (a
    memory-pruned group is represented by its first member that does)."""
    items: list[Entry | MemoryGroup] = [*out.entries, *out.memory_groups]
    pool: list[Entry] = []
    for item in sorted(items, key=lambda e: e.memory_floor_bytes):
        if isinstance(item, MemoryGroup):
            members = [c for c in item.members if _may_split(out, c, split)]
            if not members:
                continue
            rep = memory_rep(request, out, MemoryGroup(members, *_floors(item)))
        else:
            rep = item
        if rep is not None and split_exists(rep, split):
            pool.append(rep)
            if len(pool) == POOL:
                break
    return pool


def _floors(group: MemoryGroup) -> tuple[float, float]:
    return group.memory_floor_bytes, group.time_floor_s


def _may_split(out: Outcome, cfg: Config, split: StageSplit) -> bool:
    """Whether `cfg`'s stage count admits the split, from the decoder count of any entry (every
    configuration of a request has the same layers)."""
    if split != "uniform":
        return True
    count = _decoder_count(out)
    return count is None or count % (cfg.pp * cfg.vpp) == 0


def _decoder_count(out: Outcome) -> int | None:
    for e in out.entries:
        return len(main_run(e.inputs))
    return None


def split_exists(entry: Entry, split: StageSplit) -> bool:
    """Whether any stage boundaries satisfy the split (`uniform`: the decoder layers, the
    longest run of identical layers, divide evenly over the stages)."""
    if split != "uniform":
        return True  # "first_last": middle stages of one layer each, the rest at the ends
    return len(main_run(entry.inputs)) % entry.inputs.num_stages == 0


def least_peak(entry: Entry, split: StageSplit) -> float | None:
    """The lowest peak memory found for `entry` under the split: least-memory recompute on
    every layer, over boundaries that keep the split (None if none found)."""
    inputs = entry.inputs
    least = min_memory(inputs, entry.config.modes)
    candidates = [least.bounds]
    if split == "uniform":
        main, s = main_run(inputs), inputs.num_stages
        k = len(main) // s
        candidates = [(0, *(main.start + i * k for i in range(1, s)), inputs.num_layers)]
    elif split != "any":  # first_last: the hints, and middle stages of about n / s layers
        hints = hint_partitions(inputs, entry.config.modes, None)
        candidates += [h.bounds for h in hints]
        n, s = inputs.num_layers, inputs.num_stages
        if s > 2:
            k = max(1, min(n // s, (n - 2) // (s - 2)))
            first = (n - k * (s - 2)) // 2
            candidates.append((0, *(first + i * k for i in range(s - 1)), n))
    main = main_run(inputs)
    peaks = [
        score(inputs, Partition(b, least.modes)).peak_memory_bytes
        for b in dict.fromkeys(candidates)
        if split_ok(b, split, main)
    ]
    return min(peaks) if peaks else None


def _configuration(cfg: Config) -> dict[str, Any]:
    folded = {"cp": cfg.cp, "ep": cfg.ep, "etp": cfg.etp}
    return {
        "tp": cfg.tp,
        "pp": cfg.pp,
        "dp": cfg.dp,
        **{k: v for k, v in folded.items() if v > 1},
        **({"cp_comm": cfg.cp_comm} if cfg.cp > 1 else {}),
        "vpp": cfg.vpp,
        "schedule": cfg.schedule,
        "micro_batch_size": cfg.micro_batch_size,
        "zero_stage": cfg.zero_stage,
        "recompute": sorted(set(cfg.modes)),
    }


def _split_binds(request: PlanRequest, out: Outcome, split: StageSplit) -> dict[str, Any]:
    fw = request.constraints.framework
    count = _decoder_count(out)
    stages = sorted(
        {e.config.pp * e.config.vpp for e in out.entries}
        | {c.pp * c.vpp for g in out.memory_groups for c in g.members}
    )
    n = request.cluster.num_gpus
    fits = [d for d in range(1, (count or 0) + 1) if count and count % d == 0 and n % d == 0]
    explicit = sorted(k for k, caps in CAPABILITIES.items() if caps.stage_split == "any")
    rule = "an equal number of decoder layers on every stage"
    return {
        "binding": "stage_split",
        "framework": fw,
        "stage_split": split,
        "decoder_layers": count,
        "stage_counts": stages,
        "configurations_considered": out.num_configs,
        "suggestions": [
            f"constraints.pp (x vpp) dividing the {count} decoder layers and the {n} GPUs: {fits}",
            f"constraints.framework with explicit stage boundaries: {json.dumps(explicit)}",
        ],
        "message": (
            f"framework {fw} needs {rule} (stage split {split!r}): {count} decoder layers do "
            f"not divide into the {stages} stages (pp * vpp) the request allows"
        ),
    }


def _memory_binds(
    request: PlanRequest, out: Outcome, best: Entry, peak: float, floor: float
) -> dict[str, Any]:
    cap = float(request.memory_cap_bytes)
    cfg = best.config
    cons = request.constraints
    split = stage_split(request)
    tips = [
        f"more GPUs (at least {2 * request.cluster.num_gpus} to halve per-GPU state)",
        f"a higher memory cap (at least {peak / GIB:.1f} GiB)",
    ]
    if cons.recompute is not None and "full" not in cons.recompute:
        tips.append("allow full recompute (constraints.recompute)")
    if cons.micro_batch_sizes is not None and 1 not in cons.micro_batch_sizes:
        tips.append("allow micro-batch size 1")
    if cons.zero_stages is not None and 1 not in cons.zero_stages:
        tips.append("allow ZeRO-1 (constraints.zero_stages)")
    if cons.pp is not None or cons.tp is not None:
        tips.append("allow more tensor or pipeline parallelism (constraints.tp / pp)")
    if cons.cp is not None and max(cons.cp) < request.cluster.num_gpus:
        tips.append("allow more context parallelism: it divides activations (constraints.cp)")
    if request.arch is not None and request.arch.moe is not None and cons.ep is not None:
        tips.append("allow more expert parallelism: it shards the experts (constraints.ep)")
    within = f", framework {cons.framework}'s stage split {split!r}" if split != "any" else ""
    doc: dict[str, Any] = {
        "binding": "memory",
        "cap_gib": cap / GIB,
        "lowest_peak_gib": peak / GIB,
        "over_by_gib": (peak - cap) / GIB,
        "lowest_floor_gib": floor / GIB,
        "configuration": _configuration(cfg),
        "configurations_considered": out.num_configs,
        "suggestions": tips,
        "message": (
            f"the lowest peak memory found is {peak / GIB:.1f} GiB ({cfg.describe()}, "
            f"least-memory recompute everywhere{within}), {(peak - cap) / GIB:.1f} GiB above "
            f"the {cap / GIB:.1f} GiB cap"
        ),
    }
    if split != "any":
        doc["stage_split"] = split
    return doc


def _time_binds(request: PlanRequest, out: Outcome, best: Entry, peak: float) -> dict[str, Any]:
    cap = float(request.memory_cap_bytes)
    cfg = best.config
    left = out.skipped + sum(
        e.verdict == "timeout"
        or (e.result is not None and e.result.status in ("FEASIBLE", "UNKNOWN"))
        for e in out.entries
    )
    binding = "time_limit" if left else "unexplained"
    limit = request.search.time_limit_s
    why = (
        f"the search stopped at its time limit ({limit} s) with {left} configurations "
        f"unvisited or unfinished"
        if left
        else "the search found no plan although one fits (please report this request)"
    )
    return {
        "binding": binding,
        "cap_gib": cap / GIB,
        "lowest_peak_gib": peak / GIB,
        "configuration": _configuration(cfg),
        "configurations_considered": out.num_configs,
        "suggestions": [f"a longer search.time_limit_s (now {limit})"] if left else [],
        "message": (
            f"memory does not bind: {cfg.describe()} fits with a peak of {peak / GIB:.1f} GiB "
            f"under the {cap / GIB:.1f} GiB cap; {why}"
        ),
    }
