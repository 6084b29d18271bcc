"""`meshplan calibrate`: fit the cost model's constants to measured runs (planner.calibrate).

    meshplan calibrate --observations OBS.json [-o calibration.json] [--fit a,b] [--scope k=v]
                       [--json]

OBS.json is a list of observations ({"request", "candidate", "measured": {"step_time_s",
"peak_memory_gib"?}, "source"}) or {"observations": [...]}. The calibration document written
with -o is what `meshplan plan|evaluate --calibration FILE` reads (`load_calibration`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from api.cli.output import describe_validation, emit_json, fail, read_json_file
from planner.calibrate import Calibration, NotDetermined, Observation, calibrate
from planner.catalog.efficiency import CONSTANT_NAMES
from planner.errors import SpecError
from planner.specs import PlanRequest

DEFAULT_FIT = "matmul_fraction,link_fraction"


def _observations(doc: Any, *, as_json: bool) -> list[Observation]:
    items = doc.get("observations") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        fail(
            'observations: expected a non-empty list (or {"observations": [...]})',
            as_json=as_json,
        )
    out = []
    for i, item in enumerate(items):
        try:
            out.append(Observation.model_validate(item))
        except ValidationError as exc:
            message = f"observations[{i}]: {describe_validation(exc)}"
            fail(message, as_json=as_json, doc={"error": "invalid input", "detail": message})
    return out


def _scope(pairs: list[str], *, as_json: bool) -> dict[str, str]:
    scope = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--scope {pair!r}: expected KEY=VALUE", as_json=as_json)
        scope[key] = value
    return scope


def _print(cal: Calibration) -> None:
    typer.echo(f"calibration {cal.id} for {cal.gpu} ({len(cal.observations)} observations)")
    for name in CONSTANT_NAMES:
        value = cal.constants[name]
        if name in cal.fitted:
            lo_hi = cal.ranges.get(name)
            span = f"  range {lo_hi[0]:.4g} .. {lo_hi[1]:.4g}" if lo_hi else "  (no range: n = k)"
            typer.echo(f"  {name:<18} {value:.4g}  fitted{span}")
        elif name in cal.held:
            typer.echo(f"  {name:<18} {value:.4g}  held: {cal.held[name]}")
        else:
            typer.echo(f"  {name:<18} {value:.4g}  (default, not fitted)")
    w = cal.prior_weight
    typer.echo(f"prior weight   {'inf (held)' if w is None else f'{w:g}'} (leave-one-out)")
    typer.echo("step time per observation: measured, predicted before -> after (error)")
    for f in cal.fit:
        typer.echo(
            f"  {f.measured_step_time_s:9.4g} s  {f.predicted_before_s:9.4g} s "
            f"({f.error_before:+.1%}) -> {f.predicted_after_s:9.4g} s ({f.error_after:+.1%})"
            f"  {f.source}"
        )


def calibrate_command(
    observations: Annotated[
        Path, typer.Option("--observations", help="observations JSON (a list)")
    ],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="write the calibration document")
    ] = None,
    fit: Annotated[
        str, typer.Option("--fit", help=f"constants to fit, of {', '.join(CONSTANT_NAMES)}")
    ] = DEFAULT_FIT,
    scope: Annotated[
        list[str] | None,
        typer.Option("--scope", help="free-form KEY=VALUE (framework, version, cluster)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the calibration as JSON")] = False,
) -> None:
    """Fit the cost model's constants to measured step times (least squares on log time)."""
    obs = _observations(read_json_file(str(observations)), as_json=as_json)
    names = [n.strip() for n in fit.split(",") if n.strip()]
    bad = [n for n in names if n not in CONSTANT_NAMES]
    if bad or not names:
        fail(f"--fit {fit!r}: choose from {', '.join(CONSTANT_NAMES)}", as_json=as_json)
    try:
        cal = calibrate(obs, names=names, scope=_scope(scope or [], as_json=as_json))
    except NotDetermined as exc:
        fail(
            f"not determined: {exc}",
            as_json=as_json,
            doc={"error": "not determined", "detail": str(exc)},
        )
    except SpecError as exc:
        fail(str(exc), as_json=as_json, doc={"error": str(exc), "field": exc.field})
    except ValueError as exc:
        fail(str(exc), as_json=as_json, doc={"error": "invalid input", "detail": str(exc)})
    if output is not None:
        output.write_text(cal.model_dump_json(indent=1))
    if as_json:
        emit_json(cal)
    else:
        _print(cal)
        if output is not None:
            typer.echo(f"wrote {output}")


def load_calibration(path: Path, request: PlanRequest, *, as_json: bool) -> PlanRequest:
    """`request` planned with the calibration document at `path` (one-line errors, exit 2)."""
    try:
        cal = Calibration.model_validate(read_json_file(str(path)))
    except ValidationError as exc:
        message = f"{path}: not a calibration document: {describe_validation(exc)}"
        fail(message, as_json=as_json, doc={"error": "invalid input", "detail": message})
    gpu = request.cluster.device.name
    if cal.gpu != gpu:
        fail(
            f"{path}: calibration {cal.id} is for {cal.gpu}, the request's cluster is {gpu}",
            as_json=as_json,
        )
    return request.model_copy(update={"calibration": cal.ref()})


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
