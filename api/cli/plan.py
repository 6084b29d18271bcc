"""`meshplan plan`: search the best plan for a request (planner.search)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from api.cli.calibrate import load_calibration
from api.cli.documents import expect
from api.cli.files import write_output
from api.cli.output import describe_validation, emit_json, fail, read_json_file
from api.cli.progress import search_progress
from api.timeline import plan_timeline_svg
from planner.errors import InfeasibleError, SpecError
from planner.plan import PlanResult
from planner.search import search
from planner.specs import PlanRequest

GIB = 1024**3

# Built-in requests, so the planner runs with no file (README quickstart).
EXAMPLES: dict[str, dict[str, Any]] = {
    "gpt3-64": {
        "model": {
            "family": "gpt",
            "name": "gpt3-13b",
            "num_layers": 40,
            "hidden_size": 5120,
            "num_attention_heads": 40,
            "vocab_size": 51200,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_length": 2048},
        "constraints": {"memory_cap_gib": 76, "micro_batch_sizes": [1, 2, 4]},
        "search": {"time_limit_s": 10, "top_k": 3},
    },
    "article-pp8": {
        "model": {
            "family": "gpt",
            "name": "gpt-14-layers",
            "num_layers": 14,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "vocab_size": 51200,
        },
        "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_length": 2048},
        "constraints": {
            "memory_cap_gib": 40,
            "pp": [8],
            "tp": [1],
            "micro_batch_sizes": [1, 2],
            "zero_stages": [1],
        },
        "objective": "bubble",
        "search": {"time_limit_s": 10, "top_k": 3},
    },
}


def _seconds(value_s: float) -> str:
    return f"{value_s * 1e3:.4g} ms" if value_s < 1 else f"{value_s:.4g} s"


def _print(result: PlanResult) -> None:
    p, s = result.plan, result.search
    pr = p.prediction
    proof = ""
    if s.status != "OPTIMAL" and s.gap is not None and s.lower_bound_s is not None:
        proof = f", gap {s.gap:.2%} to the bound {_seconds(s.lower_bound_s)}"
    typer.echo(
        f"{p.model_name} on {p.num_gpus} x {p.gpu}  "
        f"(search {s.status}{proof}, {s.wall_time_s:.2f} s)"
    )
    typer.echo(
        f"degrees        tp={p.tp} pp={p.pp} dp={p.dp} vpp={p.vpp}  schedule {p.schedule}  "
        f"mbs={p.micro_batch_size} m={p.num_microbatches}  ZeRO-{p.zero_stage}  "
        f"sp={p.sequence_parallel}  recompute {p.recompute}"
        + (
            " (" + ", ".join(f"{n} {m}" for m, n in p.recompute_blocks.items()) + " blocks)"
            if p.recompute == "mixed"
            else ""
        )
    )
    typer.echo(
        f"step time      {_seconds(pr.step_time_s)}  bubble {pr.bubble_fraction:.2%}  "
        f"{pr.hardware_tflops_per_gpu:.1f} TFLOP/s per GPU (MFU {pr.mfu:.1%})"
    )
    typer.echo(
        f"memory         peak {pr.peak_memory_bytes / GIB:.2f} GiB of "
        f"{pr.memory_cap_bytes / GIB:.2f} GiB cap"
    )
    typer.echo(f"cost model     calibration {p.calibration_id or 'none (catalog defaults)'}")
    typer.echo("stage rank  layers      recompute")
    for st in pr.stages:
        modes = {m: st.recompute.count(m) for m in dict.fromkeys(st.recompute)}
        mix = ", ".join(f"{n} {m}" for m, n in modes.items())
        typer.echo(f"{st.stage:>5} {st.rank:>4}  [{st.layers[0]}, {st.layers[1]})".ljust(24) + mix)
    typer.echo("rank  memory GiB")
    for r in pr.ranks:
        typer.echo(f"{r.rank:>4}  {r.total_bytes / GIB:8.2f}")
    typer.echo("why:")
    for line in p.why:
        typer.echo(f"  - {line}")
    for alt in result.alternatives:
        typer.echo(
            f"alternative    tp={alt.tp} pp={alt.pp} dp={alt.dp} vpp={alt.vpp} {alt.schedule} "
            f"mbs={alt.micro_batch_size} ZeRO-{alt.zero_stage}: "
            f"{_seconds(alt.prediction.step_time_s)}, bubble {alt.prediction.bubble_fraction:.2%}"
        )
    if s.alternatives_note is not None:
        typer.echo(f"alternatives   {s.alternatives_note}")
    typer.echo(
        f"search         {s.candidates_considered} configurations, {s.candidates_pruned} pruned, "
        f"{s.solver_calls} CP-SAT solves"
    )


def _print_replan(doc: dict[str, Any]) -> None:
    old, new = doc["old"], doc["new"]
    typer.echo(
        f"replanned {old['id']} (cost model {old['cost_model_version']}, calibration "
        f"{old['calibration_id'] or 'none'}) -> {new['id']} (cost model "
        f"{new['cost_model_version']}, calibration {new['calibration_id'] or 'none'})"
        + ("  [stored already]" if new["cache_hit"] else "")
    )
    diff = doc["diff"]
    for name, d in {**diff["configuration"], **diff["prediction"]}.items():
        mark = " " if d.get("changed") is False or d.get("change") == 0 else "*"
        change = ""
        if d.get("relative_change") is not None:
            change = f"  ({d['relative_change']:+.1%})"
        typer.echo(f"{mark} {name:<18} {d['old']!s:>14} -> {d['new']!s:<14}{change}")
    typer.echo("changed: " + (", ".join(diff["changed"]) or "no configuration field"))


def replan_via_service(
    plan_id: str, *, calibration_id: str | None, url: str, api_key: str | None, as_json: bool
) -> None:
    """`meshplan plan --replan ID`: POST /v1/plans/{id}/replan on the service (api.replan)."""
    from api.cli.submissions import Service

    service = Service(url, api_key, as_json)
    body = {} if calibration_id is None else {"calibration_id": calibration_id}
    r = service.call("POST", f"/v1/plans/{plan_id}/replan", ok=(200, 201), json=body)
    emit_json(r.json()) if as_json else _print_replan(r.json())


def plan(
    request: Annotated[Path | None, typer.Option("--request", help="plan request JSON")] = None,
    example: Annotated[
        str | None, typer.Option("--example", help=f"built-in request: {', '.join(EXAMPLES)}")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    svg: Annotated[Path | None, typer.Option("--svg", help="write the timeline as SVG")] = None,
    calibration: Annotated[
        Path | None, typer.Option("--calibration", help="calibration JSON (meshplan calibrate)")
    ] = None,
    replan: Annotated[
        str | None,
        typer.Option(
            "--replan",
            help="a stored plan's id: plan its request again on the service (--url) under "
            "today's cost model and print the diff",
        ),
    ] = None,
    calibration_id: Annotated[
        str | None,
        typer.Option("--calibration-id", help="with --replan: a stored calibration to use"),
    ] = None,
    url: Annotated[
        str, typer.Option("--url", envvar="MESHPLAN_URL", help="service URL (--replan)")
    ] = "http://127.0.0.1:8000",
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="MESHPLAN_API_KEY", help="API key")
    ] = None,
) -> None:
    """Search the fastest plan (or the smallest bubble) that fits the memory cap."""
    if replan is not None:
        if request is not None or example is not None or calibration is not None:
            fail("--replan takes no --request, --example or --calibration", as_json=as_json)
        replan_via_service(
            replan, calibration_id=calibration_id, url=url, api_key=api_key, as_json=as_json
        )
        return
    if (request is None) == (example is None):
        fail("give exactly one of --request or --example", as_json=as_json)
    if example is not None and example not in EXAMPLES:
        fail(f"unknown example {example!r}; choose from {', '.join(EXAMPLES)}", as_json=as_json)
    if example is not None:
        doc = EXAMPLES[example]
    else:
        doc = expect(read_json_file(str(request)), "request", str(request))
    try:
        req = PlanRequest.model_validate(doc)
    except ValidationError as exc:
        message = describe_validation(exc)
        fail(message, as_json=as_json, doc={"error": "invalid input", "detail": message})
    if calibration is not None:
        req = load_calibration(calibration, req, as_json=as_json)
    try:
        with search_progress(as_json=as_json) as on_progress:
            result = search(req, on_progress=on_progress, clock=time.monotonic)
    except InfeasibleError as exc:
        fail(
            f"infeasible: {exc.diagnosis.get('message', exc)}",
            code=1,
            as_json=as_json,
            doc={"error": "infeasible", "diagnosis": exc.diagnosis},
        )
    except SpecError as exc:
        fail(str(exc), as_json=as_json, doc={"error": str(exc), "field": exc.field})
    if svg is not None:
        write_output(svg, plan_timeline_svg(result.plan), as_json=as_json)
    if as_json:
        emit_json(
            {
                "plan": result.plan.model_dump(mode="json"),
                "alternatives": [a.model_dump(mode="json") for a in result.alternatives],
                "search": result.search.model_dump(mode="json"),
            }
        )
    else:
        _print(result)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
