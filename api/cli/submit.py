"""`meshplan submit`: plan (or take a stored plan) and submit it to a cluster scheduler
through the service, optionally following the job to its end."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from api.cli.output import emit_json, fail, read_json_file
from api.cli.submissions import (
    DEFAULT_URL,
    FINAL,
    JsonOpt,
    KeyOpt,
    Service,
    UrlOpt,
    describe,
    print_submission,
)

Backend = Literal["slurm", "kubernetes"]
FrameworkName = Literal["meshplan", "megatron", "torchtitan", "deepspeed"]


def _pairs(values: list[str] | None, option: str, as_json: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{option} {item!r}: expected KEY=VALUE", as_json=as_json)
        out[key] = value
    return out


def _plan_id(service: Service, request: Path | None, plan_id: str | None) -> str:
    if (request is None) == (plan_id is None):
        fail("give exactly one of --request or --plan-id", as_json=service.as_json)
    if plan_id is not None:
        return plan_id
    doc = read_json_file(str(request))
    r = service.call("POST", "/v1/plans", ok=(200, 201), json=doc)
    plan = r.json()
    how = "stored plan (same request)" if r.status_code == 200 else "new plan"
    print(f"plan {plan['id']}: {how}", file=sys.stderr)
    return str(plan["id"])


def _submit_once(service: Service, plan_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST with one Idempotency-Key, retried on a lost connection: never submits twice."""
    key = {"Idempotency-Key": uuid.uuid4().hex}
    path = f"/v1/plans/{plan_id}/submissions"
    r = service.call("POST", path, ok=(201, 409), retries=3, json=body, headers=key)
    for _ in range(30):  # 409: an attempt whose answer was lost is still being answered
        if r.status_code != 409:
            break
        time.sleep(1.0)
        r = service.call("POST", path, ok=(201, 409), retries=3, json=body, headers=key)
    if r.status_code == 409:
        fail(f"POST {path} still in flight after 30 s", code=1, as_json=service.as_json)
    doc: dict[str, Any] = r.json()
    return doc


def follow(service: Service, doc: dict[str, Any], *, interval_s: float) -> dict[str, Any]:
    """Poll the submission until it ends, one progress line per change (on stderr)."""
    start = time.monotonic()
    seen: tuple[str, str | None] | None = None
    while True:
        now = (doc["state"], doc.get("reason"))
        if now != seen:
            print(f"[{time.monotonic() - start:7.1f} s] {describe(doc)}", file=sys.stderr)
            seen = now
        if doc["state"] in FINAL:
            return doc
        time.sleep(interval_s)
        doc = service.call("GET", f"/v1/submissions/{doc['id']}").json()


def exit_code(doc: dict[str, Any]) -> int:
    """The job's exit code; 1 for a failed or cancelled job that has none."""
    code = doc.get("exit_code")
    if isinstance(code, int) and code != 0:
        return code
    return 0 if doc["state"] == "COMPLETED" else 1


def submit(
    backend: Annotated[Backend, typer.Option("--backend", help="slurm | kubernetes")],
    request: Annotated[
        Path | None, typer.Option("--request", help="plan request JSON (plans it first)")
    ] = None,
    plan_id: Annotated[str | None, typer.Option("--plan-id", help="a stored plan")] = None,
    framework: Annotated[
        FrameworkName, typer.Option("--framework", help="meshplan | megatron | ...")
    ] = "meshplan",
    partition: Annotated[str | None, typer.Option("--partition", help="Slurm partition")] = None,
    account: Annotated[str | None, typer.Option("--account", help="Slurm account")] = None,
    time_limit: Annotated[str, typer.Option("--time", help="Slurm time limit")] = "01:00:00",
    workdir: Annotated[
        str | None,
        typer.Option("--workdir", help="working directory on the cluster (default: this one)"),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeat)")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="training steps")] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="node count")] = None,
    port: Annotated[int, typer.Option("--port", help="rendezvous port")] = 29500,
    job_name: Annotated[str, typer.Option("--job-name", help="job name prefix")] = "meshplan",
    image: Annotated[str | None, typer.Option("--image", help="container image")] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="backend option KEY=VALUE (repeat)")
    ] = None,
    arg: Annotated[
        list[str] | None, typer.Option("--arg", help="trainer argument (repeat)")
    ] = None,
    report: Annotated[
        bool | None,
        typer.Option("--report/--no-report", help="post the RunReport back (default: meshplan)"),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="follow the job; exit with its code")
    ] = False,
    poll_interval_s: Annotated[float, typer.Option("--poll-interval", min=0.1)] = 2.0,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a plan to Slurm or Kubernetes through the service (plan it first with --request)."""
    service = Service(url, api_key, as_json)
    pid = _plan_id(service, request, plan_id)
    deployment: dict[str, Any] = {
        "workdir": workdir if workdir is not None else os.getcwd(),
        "env": _pairs(env, "--env", as_json),
        "options": _pairs(option, "--option", as_json),
        "port": port,
        "job_name": job_name,
        "time": time_limit,
        "entry_args": list(arg or ()),
    }
    for name, value in (
        ("partition", partition),
        ("account", account),
        ("steps", steps),
        ("nodes", nodes),
        ("image", image),
    ):
        if value is not None:
            deployment[name] = value
    body = {
        "backend": backend,
        "framework": framework,
        "deployment": deployment,
        "report": report if report is not None else framework == "meshplan",
    }
    doc = _submit_once(service, pid, body)
    if wait:
        doc = follow(service, doc, interval_s=poll_interval_s)
    emit_json(doc) if as_json else print_submission(doc)
    if wait:
        raise typer.Exit(exit_code(doc))


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
