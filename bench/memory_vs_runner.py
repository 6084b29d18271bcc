"""Per-stage and per-rank activation memory: the cost model against the runner, on CPU.

    python bench/memory_vs_runner.py [--json] [--reports DIR] [--only TEXT]

Profiles the small GPT of bench/fidelity_cpu.py (fp32, CPU), predicts each configuration below
with the cost model (`planner.cost.fixed_plan`, balanced stages) and runs it with the reference
runner (`profiler.run_plan` under torchrun, gloo, 1 warm-up step in which the saved-activation
meter records, 1 timed step): pp = 2 (vpp 1, 2, 3, full recompute, ZB-V) and pp = 4
(interleaved vpp 2, ZB-V). Prints, per configuration:
- per stage: predicted activations (peak in-flight micro-batches x one micro-batch's saved
  bytes) against the runner's measured peak of that stage's saved tensors;
- per rank: the predicted peak of saved activations over the rank's timeline (the cost
  model's rank_activation_peak over planner.schedules.held_points_of, without the transients,
  which the runner's meter does not see) and the sum of its
  stages' peaks (what the cost model charged before) against the measured peak of the rank's
  saved tensors, all its stages at once. The measured rank peak is the report's
  `peak_memory_bytes` (on CPU: the rank's peak saved activations + parameters, gradients and
  optimizer state) minus the runner's static bytes: the prediction's, plus the head's copy of
  the tied word embeddings where embedding and head share a rank (ZB-V's rank 0): the runner
  keeps both parameters and sums their gradients (profiler/runner/tied.py), the cost model
  counts one (planner.cost.inputs).
Errors are signed and relative: (measured - predicted) / predicted.

Memory does not depend on the host's speed: one run per configuration is enough. `--reports
DIR` keeps the profile and each run's RunReport there and reuses them on the next call (the
predictions are always recomputed from the current cost model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fidelity_cpu import MBS, profile, request_for, run_plan  # noqa: E402
from planner.cost import fixed_plan  # noqa: E402
from planner.cost.memory import rank_activation_peak, static_bytes  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.runreport import RunReport  # noqa: E402
from planner.schedules import held_points_of, rank_stages  # noqa: E402
from planner.specs.model import ModelProfile  # noqa: E402
from planner.specs.request import Candidate, PlanRequest  # noqa: E402


@dataclass(frozen=True)
class Config:
    label: str
    candidate: Candidate
    microbatches: int


CONFIGS = (
    Config("pp2 1f1b vpp1", Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS), 8),
    Config(
        "pp2 interleaved vpp2",
        Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=MBS),
        8,
    ),
    Config(
        "pp2 interleaved vpp3",
        Candidate(pp=2, vpp=3, schedule="interleaved-1f1b", micro_batch_size=MBS),
        8,
    ),
    Config(
        "pp2 interleaved vpp2 full recompute",
        Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=MBS, recompute="full"),
        8,
    ),
    Config("pp2 zbv", Candidate(pp=2, vpp=2, schedule="zbv", micro_batch_size=MBS), 8),
    Config(
        "pp4 interleaved vpp2",
        Candidate(pp=4, vpp=2, schedule="interleaved-1f1b", micro_batch_size=MBS),
        8,
    ),
    Config("pp4 zbv", Candidate(pp=4, vpp=2, schedule="zbv", micro_batch_size=MBS), 8),
)


@dataclass(frozen=True)
class StageRow:
    stage: int
    rank: int
    predicted_bytes: float
    measured_bytes: float
    error: float


@dataclass(frozen=True)
class RankRow:
    rank: int
    predicted_bytes: float  # timeline peak of the rank's saved activations
    sum_of_stage_peaks_bytes: float  # the former charge
    measured_bytes: float
    error: float
    sum_error: float


@dataclass(frozen=True)
class Row:
    label: str
    schedule: str
    vpp: int
    microbatches: int
    stages: tuple[StageRow, ...]
    ranks: tuple[RankRow, ...]
    worst_stage_error: float
    worst_rank_error: float


def _rel(measured: float, predicted: float) -> float:
    return (measured - predicted) / predicted if predicted else 0.0


def runner_extra_static_bytes(request: PlanRequest, plan: Plan) -> float:
    """Bytes the runner holds beyond the prediction's static bytes on the rank that holds
    both embedding and head of a tied model: the second copy's parameters, gradients and
    optimizer state (module docstring)."""
    arch = request.arch
    ranks = {s.rank for s in plan.prediction.stages if s.stage in (0, plan.pp * plan.vpp - 1)}
    if arch is None or not arch.tied or len(ranks) != 1:
        return 0.0
    words = arch.vocab_size * arch.hidden_size / plan.tp
    return static_bytes(
        words, training=request.training, zero_stage=plan.zero_stage, dp=plan.dp
    ).total_bytes


def saved_activation_peaks(plan: Plan) -> list[float]:
    """Per rank, the timeline peak of its saved activations alone (no transient: the runner's
    meter sees saved tensors only), from the plan's per-stage bytes and the schedule's held
    points (planner.cost.memory.rank_activation_peak)."""
    pred = plan.prediction
    n = len(pred.stages)
    points = held_points_of(
        plan.schedule, pp=plan.pp, vpp=plan.vpp, num_microbatches=plan.num_microbatches
    )
    per_mb = [s.activation_bytes / s.peak_inflight for s in pred.stages]
    stages = rank_stages(tuple(s.rank for s in pred.stages))
    return [
        rank_activation_peak(
            points[r],
            stages[r],
            per_mb,
            recompute_bytes=[0.0] * n,
            loss_stage=n - 1,
            loss_bytes=0.0,
            fragmentation_fraction=0.0,
        ).activations_bytes
        for r in range(plan.pp)
    ]


def compare(label: str, plan: Plan, report: RunReport, *, extra_static_bytes: float = 0.0) -> Row:
    pred = plan.prediction
    shared = {s.rank for s in pred.stages if s.stage == 0}
    stages = tuple(
        StageRow(
            stage=sp.stage,
            rank=sp.rank,
            predicted_bytes=sp.activation_bytes,
            measured_bytes=report.stages[sp.stage].activation_bytes,
            error=_rel(report.stages[sp.stage].activation_bytes, sp.activation_bytes),
        )
        for sp in pred.stages
    )
    saved = saved_activation_peaks(plan)
    ranks = []
    for rp in pred.ranks:
        m = rp.memory
        static = m.params_bytes + m.grads_bytes + m.optimizer_bytes
        if rp.rank in shared and rp.rank == pred.stages[-1].rank:
            static += extra_static_bytes
        measured = report.stages[rp.stages[0]].peak_memory_bytes - static
        summed = sum(pred.stages[s].activation_bytes for s in rp.stages)
        ranks.append(
            RankRow(
                rank=rp.rank,
                predicted_bytes=saved[rp.rank],
                sum_of_stage_peaks_bytes=summed,
                measured_bytes=measured,
                error=_rel(measured, saved[rp.rank]),
                sum_error=_rel(measured, summed),
            )
        )
    return Row(
        label=label,
        schedule=plan.schedule,
        vpp=plan.vpp,
        microbatches=plan.num_microbatches,
        stages=stages,
        ranks=tuple(ranks),
        worst_stage_error=max((s.error for s in stages), key=abs),
        worst_rank_error=max((r.error for r in ranks), key=abs),
    )


def _mib(x: float) -> str:
    return f"{x / 2**20:8.3f}"


def print_row(row: Row) -> None:
    print(f"{row.label} (m={row.microbatches})")
    for s in row.stages:
        print(
            f"  stage {s.stage} (rank {s.rank}): predicted {_mib(s.predicted_bytes)} MiB, "
            f"measured {_mib(s.measured_bytes)} MiB, {s.error:+.2%}"
        )
    for r in row.ranks:
        print(
            f"  rank {r.rank}: timeline peak {_mib(r.predicted_bytes)} MiB, measured "
            f"{_mib(r.measured_bytes)} MiB, {r.error:+.2%}   (sum of stage peaks "
            f"{_mib(r.sum_of_stage_peaks_bytes)} MiB, {r.sum_error:+.2%})"
        )


def _slug(label: str) -> str:
    return label.replace(" ", "_")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--reports", type=Path, default=None, help="keep/reuse profile and reports")
    p.add_argument("--only", default=None, help="only the configurations whose label has TEXT")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store = a.reports if a.reports is not None else Path(tmp)
        store.mkdir(parents=True, exist_ok=True)
        prof_path = store / "profile.json"
        if prof_path.exists():
            prof = ModelProfile.model_validate_json(prof_path.read_text())
        else:
            prof = profile(repeats=2)  # memory needs the bytes, not precise times
            prof_path.write_text(prof.model_dump_json())
        rows = []
        for cfg in CONFIGS:
            if a.only is not None and a.only not in cfg.label:
                continue
            c = cfg.candidate
            ranks = c.tp * c.pp * c.dp
            req = request_for(prof, ranks, c.dp * c.micro_batch_size * cfg.microbatches)
            plan = fixed_plan(req, c)
            rep_path = store / f"{_slug(cfg.label)}.report.json"
            if rep_path.exists():
                report = RunReport.model_validate_json(rep_path.read_text())
            else:
                work = Path(tmp) / _slug(cfg.label)
                work.mkdir()
                report = run_plan(plan, work, steps=1, warmup=1)
                rep_path.write_text(report.model_dump_json(indent=1))
            row = compare(
                cfg.label, plan, report, extra_static_bytes=runner_extra_static_bytes(req, plan)
            )
            rows.append(row)
            if not a.json:
                print_row(row)
    if a.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        stage = max((abs(r.worst_stage_error) for r in rows), default=0.0)
        rank = max((abs(r.worst_rank_error) for r in rows if r.vpp > 1), default=0.0)
        print(f"worst stage error {stage:.2%}; worst rank error (vpp > 1) {rank:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
