"""Shared by the runner tests: plans for the tiny models, torchrun launches, reference grads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from planner.cost import fixed_plan
from planner.plan import Plan
from planner.specs.base import ScheduleName
from planner.specs.cluster import ClusterSpec
from planner.specs.model import ModelArch
from planner.specs.request import Candidate, PlanRequest, StageSpec
from planner.specs.training import TrainingSpec
from profiler.forked import free_port, run_plan_forked
from profiler.models import build_model
from profiler.run_plan import make_optimizer, synthetic_batch
from profiler.runner.tied import EMBEDDING, OUTPUT

REPO = Path(__file__).resolve().parents[2]
SEQ = 16


def make_plan(
    arch: ModelArch,
    *,
    pp: int = 1,
    dp: int = 1,
    tp: int = 1,
    vpp: int = 1,
    schedule: ScheduleName = "1f1b",
    micro_batch_size: int = 2,
    microbatches: int = 4,
    stages: tuple[StageSpec, ...] | None = None,
    sequence_parallel: bool = False,
    zero_stage: int = 0,
) -> Plan:
    request = PlanRequest(
        model=arch,
        cluster=ClusterSpec(gpu="CPU", num_gpus=pp * dp * tp),
        training=TrainingSpec(
            global_batch_size=dp * micro_batch_size * microbatches, seq_length=SEQ, dtype="fp32"
        ),
    )
    candidate = Candidate(
        tp=tp,
        pp=pp,
        dp=dp,
        vpp=vpp,
        schedule=schedule,
        micro_batch_size=micro_batch_size,
        stages=stages,
        sequence_parallel=sequence_parallel,
        zero_stage=zero_stage,
    )
    return fixed_plan(request, candidate)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC"))}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_torchrun(
    plan: Plan,
    tmp: Path,
    *extra: str,
    timeout_s: float = 240,
    torchrun_args: tuple[str, ...] = (),
) -> Path:
    """Run the runner on `plan` with torchrun in `tmp`; returns the directory of grad dumps.

    `torchrun_args`: more torchrun options (e.g. `--log-dir DIR --redirects 3`)."""
    plan_path = tmp / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    grads = tmp / "grads"
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", str(plan.num_gpus),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
        *torchrun_args, "-m", "profiler.run_plan", "--plan", str(plan_path),
        "--steps", "1", "--warmup", "0", "--dump-grads", str(grads), "--quiet",
        "--optimizer", "sgd", *extra,
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        raise AssertionError(f"torchrun failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return grads


def run_forked(plan: Plan, tmp: Path, *extra: str, timeout_s: float = 120) -> Path:
    """Run the runner's `main` in `plan.num_gpus` processes, as torchrun would (same
    environment variables), forked from a server that has imported torch once: each run then
    costs about a second instead of torchrun's interpreter start-ups."""
    plan_path = tmp / "plan.json"
    plan_path.write_text(plan.model_dump_json())
    grads = tmp / "grads"
    argv = [
        "--plan", str(plan_path), "--steps", "1", "--warmup", "0",
        "--dump-grads", str(grads), "--quiet", "--optimizer", "sgd", *extra,
    ]  # fmt: skip
    codes = run_plan_forked(plan.num_gpus, argv, timeout_s=timeout_s)
    if any(c != 0 for c in codes):
        raise AssertionError(f"runner processes exited with {codes} (None: timed out)")
    return grads


class UserModel(nn.Module):
    """A user's model for `--model-factory`: not a built-in block (post-norm, ReLU MLP only)."""

    def __init__(self, *, seq_length: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.vocab_size = 96
        self.embedding = nn.Embedding(self.vocab_size, 32)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.LayerNorm(32))
            for _ in range(3)
        )
        self.proj = nn.Linear(32, self.vocab_size)
        self.head = _UserHead(self.proj)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        loss: torch.Tensor = self.head(x, labels)
        return loss


class _UserHead(nn.Module):
    def __init__(self, proj: nn.Linear) -> None:
        super().__init__()
        self.proj = proj

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.proj(x).flatten(0, 1), labels.flatten())


def user_model(*, seq_length: int, seed: int) -> UserModel:
    return UserModel(seq_length=seq_length, seed=seed)


def reference_grads(
    plan: Plan,
    *,
    seed: int = 0,
    steps: int = 1,
    model: nn.Module | None = None,
    vocab_size: int | None = None,
) -> list[dict[str, torch.Tensor]]:
    """One process, the whole global batch, the plain model: d(mean loss)/d(parameter) of
    each of `steps` steps, with the runner's SGD step between them (`--optimizer sgd`)."""
    if model is None:
        assert plan.arch is not None
        model = build_model(plan.arch, seq_length=plan.seq_length, seed=seed)
    optimizer = make_optimizer("sgd", list(model.parameters()))
    out: list[dict[str, torch.Tensor]] = []
    for step in range(steps):
        tokens, labels = synthetic_batch(plan, seed=seed, step=step, vocab_size=vocab_size)
        optimizer.zero_grad(set_to_none=True)
        model(tokens, labels).backward()
        if plan.arch is not None and plan.arch.tied:
            # the runner trains the tied pair as one weight: both get the sum of their grads
            emb, head = model.get_parameter(EMBEDDING), model.get_parameter(OUTPUT)
            assert emb.grad is not None and head.grad is not None
            total = emb.grad + head.grad
            emb.grad, head.grad = total.clone(), total.clone()
        grads = {
            n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None
        }
        if isinstance(model, UserModel):
            grads = {
                n.replace("proj.", "head.proj.", 1) if n.startswith("proj.") else n: g
                for n, g in grads.items()
            }
        out.append(grads)
        optimizer.step()
    return out


def _labelled(label: str) -> Callable[[str], str]:
    return lambda message: f"{label}: {message}"


def load_dumps(directory: Path, *, step: int = 0) -> list[dict[str, torch.Tensor]]:
    files = sorted((directory / f"step{step}").glob("grads_rank*.pt"))
    return [torch.load(f) for f in files]


def dumped_steps(directory: Path) -> int:
    """How many steps the run dumped gradients of (directories step0, step1, ...)."""
    n = 0
    while (directory / f"step{n}").is_dir():
        n += 1
    return n


def assert_same_grads(
    plan: Plan,
    directory: Path,
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    model: nn.Module | None = None,
    vocab_size: int | None = None,
) -> int:
    """At every dumped step, every reference gradient appears on some rank, and every rank's
    copy matches it. Returns the number of steps compared."""
    steps = dumped_steps(directory)
    assert steps >= 1, f"no gradient dumps under {directory}"
    refs = reference_grads(plan, steps=steps, model=model, vocab_size=vocab_size)
    for step, ref in enumerate(refs):
        dumps = load_dumps(directory, step=step)
        assert len(dumps) == plan.num_gpus, (
            f"step {step}: {len(dumps)} dumps for {plan.num_gpus} ranks"
        )
        seen: set[str] = set()
        for rank, dump in enumerate(dumps):
            unknown = sorted(set(dump) - set(ref))
            assert not unknown, f"rank {rank} has parameters the reference lacks: {unknown}"
            for name, g in dump.items():
                torch.testing.assert_close(
                    g,
                    ref[name],
                    rtol=rtol,
                    atol=atol,
                    msg=_labelled(f"step {step}: {name} rank {rank}"),
                )
                seen.add(name)
        missing = sorted(set(ref) - seen)
        assert not missing, f"step {step}: no rank holds gradients for {missing}"
    return steps
