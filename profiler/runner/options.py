"""Command-line options of the runner and reading the plan document it is given."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.plan import Plan

__all__ = ["RunOptions", "load_plan", "parse_args"]


@dataclass(frozen=True)
class RunOptions:
    plan_path: Path
    steps: int
    warmup: int
    seed: int
    dtype: str | None  # None: fp32 on CPU, bf16 on CUDA
    device: str | None  # None: cuda when available, else cpu
    optimizer: str
    report_path: Path | None
    report_url: str | None
    api_key: str | None
    plan_id: str | None
    dump_grads: Path | None
    quiet: bool
    model_factory: str | None = None


def parse_args(argv: list[str] | None = None) -> RunOptions:
    p = argparse.ArgumentParser(
        prog="python -m profiler.run_plan",
        description="Run a meshplan plan under torchrun on synthetic data and measure it.",
    )
    p.add_argument("--plan", required=True, type=Path, help="plan JSON (bare, CLI or service)")
    p.add_argument("--steps", type=int, default=10, help="measured steps (default 10)")
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="unmeasured warm-up steps (default 3; at least one runs: activations are measured "
        "in them)",
    )
    p.add_argument("--seed", type=int, default=0, help="model init and data seed (default 0)")
    p.add_argument(
        "--dtype",
        choices=("fp32", "bf16", "fp16"),
        default=None,
        help="default: fp32 on CPU, bf16 on CUDA",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="default: cuda when available, else cpu",
    )
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--report", type=Path, default=None, help="write the RunReport JSON here")
    p.add_argument("--report-url", default=None, help="service URL: POST {url}/v1/plans/{id}/runs")
    p.add_argument("--api-key", default=None, help="API key for --report-url")
    p.add_argument("--plan-id", default=None, help="plan id (default: the document's 'id')")
    p.add_argument(
        "--model-factory",
        default=None,
        help="package.module:function building the model (default: the plan's built-in arch)",
    )
    p.add_argument("--dump-grads", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error(f"--steps must be >= 1, got {a.steps}")
    if a.warmup < 0:
        p.error(f"--warmup must be >= 0, got {a.warmup}")
    if a.report_url is not None and a.api_key is None:
        p.error("--report-url needs --api-key")
    return RunOptions(
        plan_path=a.plan,
        steps=a.steps,
        warmup=a.warmup,
        seed=a.seed,
        dtype=a.dtype,
        device=a.device,
        optimizer=a.optimizer,
        report_path=a.report,
        report_url=a.report_url.rstrip("/") if a.report_url else None,
        api_key=a.api_key,
        plan_id=a.plan_id,
        dump_grads=a.dump_grads,
        quiet=a.quiet,
        model_factory=a.model_factory,
    )


def load_plan(path: Path) -> tuple[Plan, str | None]:
    """The Plan in `path` and its id when the document carries one.

    Accepted documents: a bare Plan; what `meshplan plan --json` prints (`{"plan": ...}`); the
    service's stored plan (`{"id": ..., "result": {"plan": ...}}`).
    """
    doc: Any = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    plan_id = doc.get("id") if isinstance(doc.get("id"), str) else None
    body: Any = doc
    if isinstance(body.get("result"), dict):
        body = body["result"]
    if isinstance(body.get("plan"), dict):
        body = body["plan"]
    if "stages" not in body or "tp" not in body:
        raise ValueError(
            f"{path}: not a plan document (expected a Plan, {{'plan': Plan}} or "
            f"{{'result': {{'plan': Plan}}}}; top-level keys {sorted(doc)})"
        )
    return Plan.model_validate(body), plan_id
