"""The calibration loop on CPU, for real: profile a tiny GPT, plan and run configurations with
the reference runner (gloo), fit a calibration on half the runs and print the other half's
step-time errors before and after (issue #17 §2; docs/cost-model.md §5).

    python bench/calibration_loop_cpu.py [--steps K] [--warmup W] [--repeats R] [--layers L]
        [--json]

1. `profiler.layer_profiler.profile_model` measures the model's layer kinds on this CPU, fp32,
   single-threaded (every runner process runs with OMP_NUM_THREADS=1).
2. Each configuration of CONFIGS (two ranks: pipelines of several schedules, micro-batch
   counts and recompute, and data parallel) becomes a plan of the measured profile on the
   catalog's `CPU` stand-in (`planner.cost.fixed_plan`): its links are the catalog's
   placeholders, not this machine's loopback gloo.
3. Each plan runs with `profiler.run_plan` in two processes forked from one server that has
   imported torch (the environment torchrun sets; tests/profiler run the runner the same
   way), K measured steps after W warm-up steps, R times round-robin over the
   configurations; the run of median step time is an observation
   (`planner.calibrate.observation_from_run`).
4. The runs alternate into a fit half and a held-out half (CONFIGS order: every second one);
   `planner.calibrate.calibrate` fits all four constants on the fit half with
   `hold_undetermined`: the constants a profile-based CPU plan does not use (its layer times
   are measured, so no GEMM or kernel constant enters) are held at their defaults and named
   with the reason. The held-out half's errors under the defaults and under the calibration
   are printed with their mean and max.
Step times on a shared 2-core machine are noisy: the bench prints the load average before
and after, and the numbers are one run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.calibrate import (  # noqa: E402
    Calibration,
    Observation,
    calibrate,
    observation_from_run,
    predict_all,
)
from planner.catalog.efficiency import CONSTANT_NAMES, DEFAULT_EFFICIENCY  # noqa: E402
from planner.cost import fixed_plan  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.runreport import RunReport  # noqa: E402
from planner.specs.cluster import ClusterSpec  # noqa: E402
from planner.specs.model import ModelArch, ModelProfile  # noqa: E402
from planner.specs.request import Candidate, Constraints, PlanRequest, ProfileRef  # noqa: E402
from planner.specs.training import TrainingSpec  # noqa: E402
from profiler.forked import run_plan_forked  # noqa: E402

SEQ = 64
MBS = 2


def tiny_gpt(layers: int = 4) -> ModelArch:
    return ModelArch(
        family="gpt",
        name="loop-gpt",
        num_layers=layers,
        hidden_size=64,
        num_attention_heads=4,
        vocab_size=256,
    )


@dataclass(frozen=True)
class Config:
    label: str
    candidate: Candidate
    microbatches: int  # per data-parallel replica


CONFIGS: tuple[Config, ...] = (
    Config("pp2 1f1b m4", Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS), 4),
    Config("pp2 gpipe m4", Candidate(pp=2, schedule="gpipe", micro_batch_size=MBS), 4),
    Config("dp2 m2", Candidate(dp=2, micro_batch_size=MBS), 2),
    Config("pp2 1f1b m8", Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS), 8),
    Config(
        "pp2 1f1b m4 full recompute",
        Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS, recompute="full"),
        4,
    ),
    Config("dp2 m4", Candidate(dp=2, micro_batch_size=MBS), 4),
    Config(
        "pp2 interleaved vpp2 m4",
        Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=MBS),
        4,
    ),
    Config("pp2 gpipe m8", Candidate(pp=2, schedule="gpipe", micro_batch_size=MBS), 8),
)


def profile(arch: ModelArch, *, repeats: int = 5) -> ModelProfile:
    """The measured profile of `arch` on this CPU, single-threaded, fp32."""
    import torch

    from profiler.layer_profiler import ProfileOptions, profile_model
    from profiler.layer_source import ModelSource

    torch.set_num_threads(1)
    source = ModelSource(name=arch.display_name, seq_length=SEQ, arch=arch)
    options = ProfileOptions(
        micro_batch_sizes=(MBS,), dtype=torch.float32, device="cpu", repeats=repeats, warmup=2
    )
    return profile_model(source, options).profile


def request_for(prof: ModelProfile, config: Config) -> PlanRequest:
    c = config.candidate
    ranks = c.tp * c.pp * c.dp
    return PlanRequest(
        model=ProfileRef(profile=prof),
        cluster=ClusterSpec(gpu="CPU", num_gpus=ranks, gpus_per_node=ranks),
        training=TrainingSpec(
            global_batch_size=c.dp * c.micro_batch_size * config.microbatches,
            seq_length=prof.seq_length,
            dtype=prof.dtype,
        ),
        constraints=Constraints(memory_reserve_gib=0.0),
    )


def run_forked(
    plan: Plan, workdir: Path, *, steps: int, warmup: int, timeout_s: float = 300
) -> RunReport:
    """`profiler.run_plan` in `plan.num_gpus` processes forked from a server that imported it
    (torchrun's environment variables); the RunReport it wrote."""
    plan_path, report_path = workdir / "plan.json", workdir / "report.json"
    plan_path.write_text(plan.model_dump_json())
    argv = [
        "--plan", str(plan_path), "--steps", str(steps), "--warmup", str(warmup),
        "--report", str(report_path), "--quiet",
    ]  # fmt: skip
    codes = run_plan_forked(plan.num_gpus, argv, timeout_s=timeout_s)
    if any(c != 0 for c in codes):
        raise RuntimeError(f"runner processes exited with {codes} (None: timed out)")
    return RunReport.model_validate_json(report_path.read_text())


def sustained_tflops(prof: ModelProfile) -> float:
    """The profile's measured compute rate: forward FLOPs over forward seconds, summed over
    its layer kinds at its micro-batch size (single-threaded, this CPU)."""
    costs = [prof.cost(kind, micro_batch_size=MBS, tp=1, sequence_parallel=False) for kind in
             dict.fromkeys(layer.kind for layer in prof.layers)]  # fmt: skip
    return sum(c.fw_flops for c in costs) / sum(c.fw_s for c in costs) / 1e12


def analytic_request(prof: ModelProfile, arch: ModelArch, config: Config) -> PlanRequest:
    """The same configuration for the analytic cost model: the architecture on the `CPU`
    stand-in with its peak set to the profile's sustained rate (the one number it takes from
    the profile; the rest is the catalog's and the four constants')."""
    req = request_for(prof, config)
    cluster = req.cluster.model_copy(update={"peak_tflops": sustained_tflops(prof)})
    return req.model_copy(update={"model": arch, "cluster": cluster})


@dataclass(frozen=True)
class Run:
    config: Config
    request: PlanRequest  # the profile's
    plan: Plan
    report: RunReport


def measure(
    prof: ModelProfile,
    configs: tuple[Config, ...],
    *,
    steps: int,
    warmup: int,
    repeats: int = 1,
) -> list[Run]:
    """Plan (from the profile) and run every configuration `repeats` times, round-robin
    (repeat k of every configuration, then repeat k + 1); each keeps its median run."""
    plans = [(c, request_for(prof, c)) for c in configs]
    reports: list[list[RunReport]] = [[] for _ in configs]
    with tempfile.TemporaryDirectory(prefix="calloop-") as tmp:
        for k in range(repeats):
            for i, (config, request) in enumerate(plans):
                plan = fixed_plan(request, config.candidate)
                workdir = Path(tmp) / f"run{i}-{k}"
                workdir.mkdir()
                report = run_forked(plan, workdir, steps=steps, warmup=warmup)
                reports[i].append(report)
                print(
                    f"  ran {config.label:<28} predicted "
                    f"{plan.prediction.step_time_s * 1e3:8.2f} ms  measured "
                    f"{report.step_time_s * 1e3:8.2f} ms",
                    file=sys.stderr,
                )
    out = []
    for (config, request), runs in zip(plans, reports, strict=True):
        median = sorted(runs, key=lambda r: r.step_time_s)[len(runs) // 2]
        out.append(Run(config, request, fixed_plan(request, config.candidate), median))
    return out


def observations(runs: list[Run], *, arch: ModelArch | None = None) -> list[Observation]:
    """Each run as an observation of the profile's request, or (`arch`) of the analytic one."""
    out = []
    for run in runs:
        request = run.request
        if arch is not None:
            request = analytic_request(run.request.profile, arch, run.config)  # type: ignore[arg-type]
        obs = observation_from_run(request, run.plan, run.report)
        out.append(obs.model_copy(update={"source": run.config.label}))
    return out


def split_halves(obs: list[Observation]) -> tuple[list[Observation], list[Observation]]:
    """Every second run to the fit, the others held out (CONFIGS alternate their kinds)."""
    return obs[0::2], obs[1::2]


def _errors(obs: list[Observation], predicted: list[float]) -> list[float]:
    return [p / o.measured.step_time_s - 1 for o, p in zip(obs, predicted, strict=True)]


def _mean_max(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    return {"mean_abs_error": sum(a) / len(a), "max_abs_error": max(a)}


def held_out_errors(fit: list[Observation], held: list[Observation]) -> dict[str, Any]:
    """Fit on `fit` (all four constants, undetermined ones held), the held-out errors before
    (catalog defaults) and after (the calibration)."""
    cal: Calibration = calibrate(fit, names=CONSTANT_NAMES, hold_undetermined=True)
    before = _errors(held, predict_all(held, DEFAULT_EFFICIENCY))
    after = _errors(held, predict_all(held, cal.efficiency))
    return {
        "calibration_id": cal.id,
        "constants": cal.constants,
        "fitted": list(cal.fitted),
        "held": cal.held,
        "prior_weight": cal.prior_weight,
        "fit_errors": [
            {"source": f.source, "before": f.error_before, "after": f.error_after} for f in cal.fit
        ],
        "held_out": [
            {"source": o.source, "measured_s": o.measured.step_time_s, "before": b, "after": a}
            for o, b, a in zip(held, before, after, strict=True)
        ],
        "before": _mean_max(before),
        "after": _mean_max(after),
    }


def loop(
    *,
    layers: int,
    steps: int,
    warmup: int,
    repeats: int = 1,
    configs: tuple[Config, ...] = CONFIGS,
) -> dict[str, Any]:
    """Profile, run, and fit both cost sources on the same runs."""
    arch = tiny_gpt(layers)
    prof = profile(arch)
    runs = measure(prof, configs, steps=steps, warmup=warmup, repeats=repeats)
    out: dict[str, Any] = {"sustained_tflops": sustained_tflops(prof)}
    for name, arch_or_none in (("profile", None), ("analytic", arch)):
        fit, held = split_halves(observations(runs, arch=arch_or_none))
        out[name] = held_out_errors(fit, held)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    out = loop(layers=args.layers, steps=args.steps, warmup=args.warmup, repeats=args.repeats)
    out["load_average_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"profile: sustained {out['sustained_tflops'] * 1e3:.2f} GFLOP/s single-threaded")
    for source in ("profile", "analytic"):
        _print_source(source, out[source])
    print(f"load average {out['load_average_1min'][0]} -> {out['load_average_1min'][1]}")


def _print_source(source: str, out: dict[str, Any]) -> None:
    print(f"== {source} cost source: calibration {out['calibration_id']}, fitted {out['fitted']}")
    for name, value in out["constants"].items():
        why = f"  held: {out['held'][name]}" if name in out["held"] else ""
        print(f"  {name:<18} {value:.4g}{why}")
    for title, rows in (("fit half", out["fit_errors"]), ("held-out half", out["held_out"])):
        print(f"  {title}, step-time error (predicted / measured - 1): defaults -> calibrated")
        for r in rows:
            print(f"    {r['source']:<28} {100 * r['before']:+7.1f}% -> {100 * r['after']:+7.1f}%")
    b, a = out["before"], out["after"]
    print(
        f"  held-out mean |error| {100 * b['mean_abs_error']:.1f}% -> "
        f"{100 * a['mean_abs_error']:.1f}%, max {100 * b['max_abs_error']:.1f}% -> "
        f"{100 * a['max_abs_error']:.1f}%"
    )


if __name__ == "__main__":
    main()
