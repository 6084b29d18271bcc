"""Fidelity on CPU: profile a small GPT, plan it for 2 and 4 ranks, run each plan with torchrun
(gloo) and print predicted against measured step time, bubble fraction and per-stage memory.

    python bench/fidelity_cpu.py [--json] [--repeats R] [--steps K] [--quick] [--reprofile]
        [--contention matched|none] [--profile FILE | --save-profile FILE]

Method (docs/runner.md, "Fidelity"):
1. `profiler.layer_profiler.profile_model` measures the model's layer kinds on this CPU, in
   fp32, single-threaded (`torch.set_num_threads(1)`), and the fixed cost torch's PipelineStage
   adds to each pipeline action (`profiler.action_overhead`, `action_overhead_s`), because
   every runner process runs with OMP_NUM_THREADS=1: 2 ranks use this machine's 2 cores,
   4 ranks oversubscribe them 2:1.
   Contention-matched (`--contention matched`, the default): for a plan of R ranks the profile's
   times are scaled by the measured slowdown of the model's fw+bw when R single-threaded
   processes run it together on this machine's cores (`profiler.contention`: throughput over
   seconds, alone vs shared), i.e. the compute speed a rank gets when all R ranks compute.
   `--contention none` plans every rank count with the profile measured alone.
2. The measured profile goes into a PlanRequest for the "CPU" stand-in GPU (no memory reserve);
   each configuration is planned with the cost model (`planner.cost.evaluate` on a fixed
   candidate; the stage split is the cost model's balanced one) -- and, when
   `planner.search.search` exists, the search's own best plan for each rank count too.
3. Each plan runs `--repeats` times under torchrun (`profiler.run_plan`, K measured steps
   after warm-up), round-robin over the plans (repeat k of every plan, then repeat k + 1);
   the table gives the median over repeats and the spread (max - min) / median of the repeats'
   step times: that spread is this machine's noise. Before each run the bench records the
   1-minute load average and the cores other work kept busy in the preceding second
   (/proc/stat); `--quiet-below C` first waits until fewer than C cores are busy. Every run
   prints a line on stderr: predicted -> measured step time, bubble and worst-stage
   activation bytes, with signed relative errors.
   Before each run (and once right after profiling) `speed_probe` times the whole model's
   fw+bw alone for 1 s: `host_slowdown` is their ratio, a diagnostic of the host's speed drift
   between profile and run (nothing is scaled by it).
   `--reprofile`: right before every run (every repeat of every plan) the model is profiled
   again and the contention factor of that plan's rank count measured again, and the plan
   (the same configuration and stages) is predicted from them; each run is compared with its
   own prediction and the table gives the medians of the per-repeat errors. On a host whose
   speed drifts within minutes this compares like with like: profile and run are seconds
   apart (a profile takes ~2 s, the contention measurement ~8 s).
Errors are signed and relative: (measured - predicted) / predicted. `memory_error` is that of the
stage with the largest |error| in saved-activation bytes (the profile's unit, the goal of 5 %);
`peak_memory_error` compares a rank's measured params + grads + optimizer + peak activations
with the prediction's total. `bubble_error` is relative too (null when the predicted bubble is
0, i.e. pp = 1); `bubble_error_abs` is measured - predicted (both are fractions of the
pipeline's makespan).

With 4 ranks on 2 cores the runner's processes share cores: each rank's compute is slower than
the single-threaded profile by up to 2x whenever more than 2 ranks compute at once. The
contention-matched profile assumes all ranks compute all the time (an upper bound: during the
pipeline's fill and drain fewer ranks compute, and they get more of the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fidelity_report import (  # noqa: E402
    RunRow,
    compare,
    compare_repeats,
    factor_of,
    markdown,
    print_table,
    progress,
    summary,
)
from bench.rank_logs import describe_failure, log_args  # noqa: E402
from planner.cost import fixed_plan  # noqa: E402
from planner.plan import Plan  # noqa: E402
from planner.runreport import RunReport  # noqa: E402
from planner.specs.cluster import ClusterSpec  # noqa: E402
from planner.specs.model import ModelArch, ModelProfile  # noqa: E402
from planner.specs.request import (  # noqa: E402
    Candidate,
    Constraints,
    PlanRequest,
    ProfileRef,
)
from planner.specs.training import TrainingSpec  # noqa: E402
from profiler.contention import measure_contention, scale_profile  # noqa: E402
from profiler.layer_profiler import ProfileOptions, profile_model  # noqa: E402
from profiler.layer_source import ModelSource  # noqa: E402

ARCH = ModelArch(
    family="gpt",
    name="bench-gpt",
    num_layers=8,
    hidden_size=128,
    num_attention_heads=4,
    vocab_size=512,
)
SEQ = 128
MBS = 2


@dataclass(frozen=True)
class Config:
    label: str
    candidate: Candidate
    microbatches: int


CONFIGS = (
    Config("2 ranks: pp2 1f1b", Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS), 8),
    Config("2 ranks: pp2 gpipe", Candidate(pp=2, schedule="gpipe", micro_batch_size=MBS), 4),
    Config(
        "2 ranks: pp2 1f1b full recompute",
        Candidate(pp=2, schedule="1f1b", micro_batch_size=MBS, recompute="full"),
        8,
    ),
    Config(
        "2 ranks: pp2 interleaved vpp2",
        Candidate(pp=2, vpp=2, schedule="interleaved-1f1b", micro_batch_size=MBS),
        8,
    ),
    Config("4 ranks: pp4 1f1b", Candidate(pp=4, schedule="1f1b", micro_batch_size=MBS), 8),
    Config(
        "4 ranks: pp2 dp2 1f1b", Candidate(pp=2, dp=2, schedule="1f1b", micro_batch_size=MBS), 4
    ),
    # the search's picks of the earlier runs (docs/runner.md), kept when it no longer picks them
    Config("2 ranks: pp2 zbv", Candidate(pp=2, vpp=2, schedule="zbv", micro_batch_size=MBS), 8),
    Config(
        "4 ranks: pp2 dp2 zbv",
        Candidate(pp=2, dp=2, vpp=2, schedule="zbv", micro_batch_size=MBS),
        4,
    ),
)


def profile(
    repeats: int,
    *,
    arch: ModelArch = ARCH,
    seq_length: int = SEQ,
    micro_batch_size: int = MBS,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> ModelProfile:
    """The measured profile (CPU: single-threaded, as every runner process runs)."""
    if device == "cpu":
        torch.set_num_threads(1)
    source = ModelSource(name=arch.display_name, seq_length=seq_length, arch=arch)
    options = ProfileOptions(
        micro_batch_sizes=(micro_batch_size,),
        dtype=dtype,
        device=device,
        repeats=repeats,
        warmup=3,
    )
    return profile_model(source, options).profile


def speed_probe(duration_s: float = 1.0, *, arch: ModelArch = ARCH) -> float:
    """Seconds per fw+bw of the whole model, one micro-batch, single-threaded, alone (the
    contention measurement's workload, `profiler.contention`): this host's compute speed now.
    A diagnostic only: probed after profiling and before each run, the ratio says how much
    slower the host computes at the run than when it was profiled; nothing is scaled by it."""
    from profiler.contention import _time_per_iter, _workload

    torch.set_num_threads(1)
    source = ModelSource(name=arch.display_name, seq_length=SEQ, arch=arch)
    run = _workload(source, tp=1, mbs=MBS, dtype=torch.float32, device="cpu", seed=0)
    return _time_per_iter(run, duration_s)[0]


def contention_matched(
    prof: ModelProfile,
    ranks: int,
    *,
    basis: str = "measured",
    arch: ModelArch = ARCH,
    micro_batch_size: int = MBS,
) -> ModelProfile:
    """`prof` with its times scaled by the slowdown of `ranks` single-threaded processes
    running the model's fw+bw together on this machine's cores: measured in wall time
    (`basis="measured"`), or processor sharing x the measured CPU-time ratio (`"model"`)."""
    torch.set_num_threads(1)
    source = ModelSource(name=arch.display_name, seq_length=prof.seq_length, arch=arch)
    c = measure_contention(source, copies=ranks, micro_batch_size=micro_batch_size)
    return scale_profile(prof, c, basis=basis)


Links = dict[int, dict[str, float]]  # ranks -> ClusterSpec link fields measured with them


def request_for(
    prof: ModelProfile,
    ranks: int,
    global_batch: int,
    *,
    gpu: str = "CPU",
    links: Links | None = None,
) -> PlanRequest:
    """The plan request; `links[ranks]` (from profiler.network) replace the catalog's figures."""
    fields = (links or {}).get(ranks, {})
    return PlanRequest(
        model=ProfileRef(profile=prof),
        cluster=ClusterSpec(
            gpu=gpu,
            num_gpus=ranks,
            gpus_per_node=max(ranks, 8 if gpu != "CPU" else ranks),
            **fields,
        ),
        training=TrainingSpec(
            global_batch_size=global_batch, seq_length=prof.seq_length, dtype=prof.dtype
        ),
        constraints=Constraints(memory_reserve_gib=0.0),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_plan(
    plan: Plan, workdir: Path, *, steps: int, warmup: int, extra: tuple[str, ...] = ()
) -> RunReport:
    plan_path = workdir / "plan.json"
    report_path = workdir / "report.json"
    plan_path.write_text(plan.model_dump_json())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    logs = workdir / "logs"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(plan.num_gpus),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
        *log_args(logs),
        "-m", "profiler.run_plan", "--plan", str(plan_path), "--steps", str(steps),
        "--warmup", str(warmup), "--report", str(report_path), "--quiet", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(
            describe_failure(logs, returncode=proc.returncode, stderr=proc.stderr, what="runner")
        )
    return RunReport.model_validate_json(report_path.read_text())


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(interval_s: float = 1.0) -> float:
    """How many cores other work kept busy over the last `interval_s` (0 .. cores)."""
    b0, t0 = _cpu_times()
    time.sleep(interval_s)
    b1, t1 = _cpu_times()
    cores = os.cpu_count() or 1
    return round(cores * (b1 - b0) / (t1 - t0), 2) if t1 > t0 else 0.0


def wait_quiet(below: float | None, max_wait_s: float) -> float:
    """Cores busy in the second before a run; with `below`, first wait (up to `max_wait_s`)
    until fewer than `below` cores are busy."""
    start = time.monotonic()
    busy = busy_cores()
    while below is not None and busy >= below and time.monotonic() - start < max_wait_s:
        busy = busy_cores()
    return busy


Profiles = dict[int, ModelProfile]  # ranks -> the profile plans of that many ranks use


def plans(profs: Profiles, configs: tuple[Config, ...], links: Links) -> list[tuple[str, Plan]]:
    out: list[tuple[str, Plan]] = []
    for cfg in configs:
        c = cfg.candidate
        ranks = c.tp * c.pp * c.dp
        gb = c.dp * c.micro_batch_size * cfg.microbatches
        req = request_for(profs[ranks], ranks, gb, links=links)
        out.append((cfg.label, fixed_plan(req, c)))
    return out


def measure_links(ranks: int, workdir: Path) -> dict[str, float]:
    """Link figures of `ranks` gloo processes on this machine (`python -m profiler.network`):
    all-reduce bus bandwidth and the small-message send/recv latency."""
    out = workdir / f"network{ranks}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    logs = workdir / f"network{ranks}-logs"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
        *log_args(logs), "-m", "profiler.network", "-o", str(out), "--backend", "gloo",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(
            describe_failure(
                logs, returncode=proc.returncode, stderr=proc.stderr, what="network profiler"
            )
        )
    links = json.loads(out.read_text())["links"]
    return {k: float(v) for k, v in links.items() if k.startswith("intra_node") and v}


def searched_plans(profs: Profiles, links: Links) -> list[tuple[str, Plan]]:
    """The search's best plan for 2 and 4 ranks, when planner.search.search exists."""
    try:
        from planner.search import search
    except ImportError:
        return []
    out: list[tuple[str, Plan]] = []
    for ranks in (2, 4):
        req = request_for(profs[ranks], ranks, 16, links=links).model_copy(
            update={
                "constraints": Constraints(
                    memory_reserve_gib=0.0, tp=(1,), micro_batch_sizes=(MBS,), zero_stages=(0,)
                )
            }
        )
        result = search(req)
        out.append((f"{ranks} ranks: searched", result.plan))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list")
    p.add_argument(
        "--markdown", type=Path, default=None, help="also write the summary as a markdown table"
    )
    p.add_argument("--repeats", type=int, default=3, help="runs of each plan (default 3)")
    p.add_argument("--steps", type=int, default=6, help="measured steps per run (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps per run (default 2)")
    p.add_argument("--quick", action="store_true", help="one 2-rank and one 4-rank config")
    p.add_argument("--profile", type=Path, default=None, help="use this ModelProfile JSON")
    p.add_argument("--save-profile", type=Path, default=None, help="write the profile here")
    p.add_argument(
        "--catalog-links",
        action="store_true",
        help="plan with the catalog's CPU link figures instead of measuring them "
        "(profiler.network with 2 and 4 gloo ranks)",
    )
    p.add_argument(
        "--quiet-below",
        type=float,
        default=None,
        metavar="CORES",
        help="before each run wait (up to --quiet-wait-s) until fewer than CORES cores are busy",
    )
    p.add_argument("--quiet-wait-s", type=float, default=60.0, help="default 60")
    p.add_argument(
        "--contention",
        choices=("matched", "model", "none"),
        default="matched",
        help="matched (default): scale the profile's times for each rank count by the measured "
        "slowdown of that many processes sharing this machine's cores; model: by processor "
        "sharing (ranks / cores) x their measured CPU-time ratio (blind to other work on the "
        "host); none: the profile alone",
    )
    p.add_argument(
        "--reprofile",
        action="store_true",
        help="profile again, and measure the contention factor of the plan's rank count, right "
        "before every run, and predict that run's plan (same stages) from them: profile and run "
        "see the host's speed of the same minute",
    )
    p.add_argument(
        "--only",
        default=None,
        metavar="TEXT",
        help="run only the fixed configurations whose label contains TEXT (and the searched "
        "plans only if 'searched' contains it)",
    )
    a = p.parse_args(argv)
    if a.profile is not None:
        prof = ModelProfile.model_validate_json(a.profile.read_text())
    else:
        prof = profile(repeats=10)
    baseline_s = speed_probe()  # the host's speed right after profiling
    if a.save_profile is not None:
        a.save_profile.write_text(prof.model_dump_json(indent=1))
    configs: tuple[Config, ...] = (CONFIGS[0], CONFIGS[4]) if a.quick else CONFIGS
    if a.only is not None:
        configs = tuple(c for c in configs if a.only in c.label)
    rank_counts = sorted({c.candidate.pp * c.candidate.dp * c.candidate.tp for c in configs})

    def matched(base: ModelProfile, counts: tuple[int, ...] = (*rank_counts, 2, 4)) -> Profiles:
        if a.contention == "none":
            return {n: base for n in counts}
        out: Profiles = {}
        for n in sorted(set(counts)):
            busy = wait_quiet(a.quiet_below, a.quiet_wait_s)  # other work skews the factor
            basis = "model" if a.contention == "model" else "measured"
            scaled = contention_matched(base, n, basis=basis)
            notes = {**scaled.notes, "busy_cores_before_contention": str(busy)}
            out[n] = scaled.model_copy(update={"notes": notes})
        return out

    profs = matched(prof)
    if not a.json:
        print(f"per-action overhead (profiler.action_overhead): {prof.action_overhead_s}")
        print(
            "profile times x "
            + ", ".join(
                f"{factor_of(p):.3f} ({n} ranks; cores busy before: "
                f"{p.notes.get('busy_cores_before_contention', '-')})"
                for n, p in sorted(profs.items())
            )
        )
    rows: list[RunRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        links: Links = {}
        if not a.catalog_links:
            links = {n: measure_links(n, Path(tmp)) for n in sorted({2, 4})}
            if not a.json:
                print(f"measured links (profiler.network, gloo): {links}")
        searched = searched_plans(profs, links) if a.only is None or a.only in "searched" else []
        chosen = plans(profs, configs, links) + searched
        # Round-robin: repeat k of every plan before repeat k + 1 of any, so that a burst of
        # other work lands on one repeat of several plans (the median drops it), not on all
        # the repeats of one plan.
        reports: list[list[RunReport]] = [[] for _ in chosen]
        loads: list[list[float]] = [[] for _ in chosen]
        busy: list[list[float]] = [[] for _ in chosen]
        slow: list[list[float]] = [[] for _ in chosen]
        # --reprofile: each run's own profile and contention factor, measured right before it
        run_plans: list[list[Plan]] = [[] for _ in chosen]
        run_profs: list[list[ModelProfile]] = [[] for _ in chosen]
        for k in range(a.repeats):
            for i, (label, first) in enumerate(chosen):
                plan, base_s = first, baseline_s
                if a.reprofile:
                    # The host's speed drifts by 20-25 % within minutes here: profile it again
                    # (2 s) and measure the contention factor of this plan's rank count (7 s)
                    # right before the run, and predict the same plan (same stages) from them.
                    ranks = first.num_gpus
                    fresh = profile(repeats=10)
                    base_s = speed_probe()
                    plan_prof = matched(fresh, (ranks,))[ranks]
                    req = request_for(plan_prof, ranks, first.global_batch_size, links=links)
                    plan = fixed_plan(req, first.candidate())
                    run_plans[i].append(plan)
                    run_profs[i].append(plan_prof)
                busy[i].append(wait_quiet(a.quiet_below, a.quiet_wait_s))
                slow[i].append(round(speed_probe() / base_s, 3))
                loads[i].append(round(os.getloadavg()[0], 2))
                work = Path(tmp) / f"run{i}_{k}"
                work.mkdir()
                rep = run_plan(plan, work, steps=a.steps, warmup=a.warmup)
                reports[i].append(rep)
                progress(k, a.repeats, label, plan, rep, loads[i][-1], busy[i][-1])
        for i, (label, plan) in enumerate(chosen):
            lk = links.get(plan.num_gpus)
            if a.reprofile:
                row = compare_repeats(
                    label, run_plans[i], run_profs[i], reports[i], loads[i], lk, busy[i]
                )
            else:
                row = compare(label, plan, reports[i], loads[i], lk, profs[plan.num_gpus], busy[i])
            rows.append(replace(row, host_slowdown=slow[i]))
        if not a.json:
            print_table(rows)
    if a.markdown is not None:
        a.markdown.write_text(markdown(rows))
    if a.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
