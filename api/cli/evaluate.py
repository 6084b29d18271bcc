"""`meshplan evaluate`: the cost model's prediction for one fixed candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from api.cli.calibrate import load_calibration
from api.cli.documents import expect
from api.cli.output import describe_validation, emit_json, fail, read_json_file
from planner.cost import evaluate as evaluate_candidate
from planner.errors import SpecError
from planner.plan import Prediction
from planner.specs import Candidate, PlanRequest

GIB = 1024**3


def _seconds(value_s: float) -> str:
    return f"{value_s * 1e3:.4g} ms" if value_s < 1 else f"{value_s:.4g} s"


def _print(request: PlanRequest, candidate: Candidate, p: Prediction) -> None:
    c = candidate
    typer.echo(
        f"{request.model_name} on {request.cluster.num_gpus} x {request.cluster.gpu}: "
        f"tp={c.tp} pp={c.pp} dp={c.dp} vpp={c.vpp} {c.schedule} mbs={c.micro_batch_size} "
        f"zero={c.zero_stage} sp={c.sequence_parallel} recompute={c.recompute}"
    )
    typer.echo(
        f"step time      {_seconds(p.step_time_s)}  (pipeline {_seconds(p.pipeline_s)}, "
        f"dp sync {_seconds(p.dp_sync_s)}, optimizer {_seconds(p.optimizer_s)})"
    )
    typer.echo(f"throughput     {p.tokens_per_s:,.0f} tokens/s")
    typer.echo(
        f"per GPU        {p.model_tflops_per_gpu:.1f} model TFLOP/s, "
        f"{p.hardware_tflops_per_gpu:.1f} with recompute; MFU {p.mfu:.1%}"
    )
    typer.echo(f"bubble         {p.bubble_fraction:.2%}")
    verdict = "fits" if p.feasible else "DOES NOT FIT"
    typer.echo(
        f"memory         peak {p.peak_memory_bytes / GIB:.2f} GiB of {p.memory_cap_bytes / GIB:.2f}"
        f" GiB cap: {verdict} (margin {p.margin_bytes / GIB:+.2f} GiB)"
    )
    typer.echo("rank  stages        params   grads   optim   activ  buffers reserve   total GiB")
    for r in p.ranks:
        m = r.memory
        stages = ",".join(str(s) for s in r.stages)
        if len(stages) > 12:
            stages = stages[:11] + "…"
        cells = (
            m.params_bytes,
            m.grads_bytes,
            m.optimizer_bytes,
            m.activations_bytes,
            m.buffers_bytes,
            m.reserve_bytes,
            r.total_bytes,
        )
        typer.echo(f"{r.rank:>4}  {stages:<12}" + "".join(f"{v / GIB:>8.2f}" for v in cells))


def evaluate(
    request: Annotated[Path, typer.Option("--request", help="plan request JSON")],
    candidate: Annotated[Path, typer.Option("--candidate", help="candidate JSON")],
    as_json: Annotated[bool, typer.Option("--json", help="print the Prediction as JSON")] = False,
    calibration: Annotated[
        Path | None, typer.Option("--calibration", help="calibration JSON (meshplan calibrate)")
    ] = None,
) -> None:
    """Predict step time, throughput, bubble and per-GPU memory of one candidate."""
    try:
        req_doc = expect(read_json_file(str(request)), "request", str(request))
        cand_doc = expect(read_json_file(str(candidate)), "candidate", str(candidate))
        req = PlanRequest.model_validate(req_doc)
        cand = Candidate.model_validate(cand_doc)
    except ValidationError as exc:
        message = describe_validation(exc)
        fail(message, as_json=as_json, doc={"error": "invalid input", "detail": message})
    if calibration is not None:
        req = load_calibration(calibration, req, as_json=as_json)
    try:
        prediction = evaluate_candidate(req, cand)
    except SpecError as exc:
        fail(str(exc), as_json=as_json, doc={"error": str(exc), "field": exc.field})
    if as_json:
        emit_json(prediction)
    else:
        _print(req, cand, prediction)


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate)
