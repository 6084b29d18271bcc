"""`meshplan bubble`: the pipeline-bubble calculator (simulated, not a formula)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from api.cli.files import write_output
from api.cli.output import describe_validation, emit_json, fail
from planner.bubble import (
    TABLE_M,
    TABLE_PP,
    TABLE_SCHEDULES,
    BubbleRequest,
    BubbleResult,
    BubbleTable,
    bubble_calc,
    bubble_table,
    smallest_microbatches,
    timeline_svg,
)
from planner.errors import SpecError
from planner.specs.base import SCHEDULES


def _numbers(option: str, text: str | None, *, as_json: bool) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        fail(f"{option}={text!r}: expected a number or a comma list of numbers", as_json=as_json)


def _seconds(value_s: float) -> str:
    return f"{value_s * 1e3:.4g} ms" if value_s < 1 else f"{value_s:.4g} s"


def _print_result(result: BubbleResult) -> None:
    typer.echo(
        f"schedule {result.schedule}  pp={result.pp} vpp={result.vpp} m={result.num_microbatches}"
    )
    typer.echo(f"step time        {_seconds(result.step_time_s)}")
    line = f"bubble           {result.bubble_fraction:.2%}"
    if result.closed_form_bubble_fraction is not None:
        line += f"  (closed form {result.closed_form_bubble_fraction:.2%})"
    typer.echo(line)
    typer.echo(
        "peak in-flight   " + " ".join(str(n) for n in result.peak_inflight) + "  (per stage)"
    )


def _print_table(table: BubbleTable) -> None:
    names = [f"{name}" + (f" v={vpp}" if vpp > 1 else "") for name, vpp in TABLE_SCHEDULES]
    rows = {(r.schedule, r.pp, r.num_microbatches): r for r in table.rows}
    typer.echo(
        f"Bubble fraction of the step time (simulated, uniform stages, fw={table.fw_s:g} "
        f"bw={table.bw_s:g}) and activation memory of the first rank in micro-batches."
    )
    head = "   P    M | " + " ".join(f"{n:>18}" for n in names)
    head += " | " + " ".join(f"{n:>18}" for n in names)
    typer.echo(f"{'':11}| {'bubble':^56} | {'activations (micro-batches)':^56}")
    typer.echo(head)
    for pp in TABLE_PP:
        for m in TABLE_M:
            cells = [rows[(name, pp, m)] for name, _ in TABLE_SCHEDULES]
            bubbles = " ".join(f"{c.bubble_fraction:>18.1%}" for c in cells)
            memory = " ".join(f"{c.activation_microbatches:>18g}" for c in cells)
            typer.echo(f"{pp:>4} {m:>4} | {bubbles} | {memory}")
    typer.echo(
        "GPipe and 1F1B: (P-1)/(M+P-1); interleaved: (P-1)/(vM+P-1) (M a multiple of P). "
        "1F1B saves memory, not bubble."
    )


def bubble(
    schedule: Annotated[str, typer.Option(help=f"one of {', '.join(SCHEDULES)}")] = "1f1b",
    pp: Annotated[int | None, typer.Option(help="pipeline ranks")] = None,
    microbatches: Annotated[int | None, typer.Option(help="micro-batches per step")] = None,
    vpp: Annotated[
        int | None, typer.Option(help="chunks per rank (default 2 for interleaved-1f1b/zbv)")
    ] = None,
    fw_s: Annotated[
        str | None, typer.Option("--fw-s", help="forward s: one number or pp*vpp")
    ] = None,
    bw_s: Annotated[str | None, typer.Option("--bw-s", help="full backward s, same form")] = None,
    w_s: Annotated[
        str | None, typer.Option("--w-s", help="weight-grad part of bw (zb-h1, zbv)")
    ] = None,
    p2p_s: Annotated[str | None, typer.Option("--p2p-s", help="p2p s: one or pp*vpp-1")] = None,
    table: Annotated[bool, typer.Option("--table", help="the article's P x M table")] = False,
    target_bubble: Annotated[
        float | None, typer.Option(help="smallest M reaching this bubble")
    ] = None,
    svg: Annotated[Path | None, typer.Option(help="write the timeline as SVG")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Step time, bubble and in-flight micro-batches of a pipeline schedule, simulated."""
    fw = _numbers("--fw-s", fw_s, as_json=as_json)
    bw = _numbers("--bw-s", bw_s, as_json=as_json)
    if table:
        result_table = bubble_table(fw_s=fw[0] if fw else 1.0, bw_s=bw[0] if bw else 2.0)
        emit_json(result_table) if as_json else _print_table(result_table)
        return
    missing = [name for name, v in (("--pp", pp), ("--fw-s", fw), ("--bw-s", bw)) if v is None]
    if microbatches is None and target_bubble is None:
        missing.append("--microbatches")
    if missing:
        fail(f"missing {', '.join(missing)} (or use --table)", as_json=as_json)
    assert pp is not None  # for the type checker: checked just above
    fields: dict[str, object] = {
        "schedule": schedule,
        "pp": pp,
        "num_microbatches": microbatches if microbatches is not None else pp,
        "vpp": vpp,
        "fw_s": fw,
        "bw_s": bw,
        "include_timeline": True,
    }
    for name, option, text in (("w_s", "--w-s", w_s), ("p2p_s", "--p2p-s", p2p_s)):
        values = _numbers(option, text, as_json=as_json)
        if values is not None:
            fields[name] = values
    try:
        request = BubbleRequest.model_validate(fields)
    except ValidationError as exc:
        message = describe_validation(exc)
        fail(message, as_json=as_json, doc={"error": "invalid request", "detail": message})
    try:
        if target_bubble is not None:
            target = smallest_microbatches(request, target_bubble)
            if as_json:
                emit_json(target)
            elif target.num_microbatches is None:
                typer.echo(
                    f"{schedule} at pp={pp}: bubble {target_bubble:.2%} not reached with "
                    f"M <= {target.max_microbatches}"
                )
            else:
                typer.echo(
                    f"{schedule} at pp={pp} vpp={target.vpp}: M = {target.num_microbatches} "
                    f"gives bubble {target.bubble_fraction:.2%} <= {target_bubble:.2%}"
                )
            return
        result = bubble_calc(request)
    except SpecError as exc:
        fail(str(exc), as_json=as_json, doc={"error": str(exc), "field": exc.field})
    if svg is not None:
        write_output(svg, timeline_svg(request), as_json=as_json)
    emit_json(result) if as_json else _print_result(result)


def register(app: typer.Typer) -> None:
    app.command("bubble")(bubble)
