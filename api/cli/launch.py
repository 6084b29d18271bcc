"""`meshplan launch`: torchrun, Slurm or Kubernetes configs for a plan file or a stored plan."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError

from api.cli.documents import expect
from api.cli.files import announce
from api.cli.output import describe_validation, emit_json, fail, read_json_file
from api.launch_fit import fit_cluster, stored_gpus_per_node
from api.refusal import one_line, summarise
from planner.errors import SpecError, UnsupportedPlanError
from planner.launch import Deployment, LaunchBundle, render
from planner.plan import Plan

Target = Literal["torchrun", "slurm", "kubernetes"]
FrameworkName = Literal["meshplan", "megatron", "torchtitan", "deepspeed"]


def plan_from_document(doc: Any) -> Plan:
    """The Plan inside what `meshplan plan --json` prints ({"plan", ...}), what the service
    returns ({"result": {"plan", ...}}), or a bare Plan."""
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
        doc = doc["result"]
    if isinstance(doc, dict) and isinstance(doc.get("plan"), dict):
        doc = doc["plan"]
    return Plan.model_validate(doc)


def fetch_plan_document(url: str, plan_id: str, api_key: str | None, *, as_json: bool) -> Any:
    import httpx  # here, not at the top: a plan file needs no HTTP client

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        r = httpx.get(f"{url.rstrip('/')}/v1/plans/{plan_id}", headers=headers, timeout=30.0)
    except httpx.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}", as_json=as_json)
    if r.status_code != 200:
        detail = r.text[:500]
        fail(
            f"GET /v1/plans/{plan_id} answered {r.status_code}: {detail}",
            as_json=as_json,
            doc={"error": "plan not fetched", "status": r.status_code, "detail": detail},
        )
    return r.json()


def write_files(bundle: LaunchBundle, out_dir: Path) -> list[Path]:
    written = []
    for f in bundle.files:
        rel = PurePosixPath(f.name)
        if rel.is_absolute() or ".." in rel.parts:
            fail(f"refusing to write {f.name!r} outside {out_dir}")
        path = out_dir.joinpath(*rel.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.content)
        path.chmod(f.mode)
        written.append(path)
    return written


def _env_pairs(values: list[str]) -> dict[str, str]:
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value
    return env


def launch(
    target: Annotated[Target, typer.Option("--target", help="torchrun | slurm | kubernetes")],
    framework: Annotated[
        FrameworkName,
        typer.Option("--framework", help="meshplan | megatron | torchtitan | deepspeed"),
    ] = "meshplan",
    plan_file: Annotated[
        Path | None, typer.Option("--plan-file", help="`meshplan plan --json` output or a Plan")
    ] = None,
    plan_id: Annotated[
        str | None, typer.Option("--plan-id", help="a plan stored in the service")
    ] = None,
    url: Annotated[
        str, typer.Option("--url", envvar="MESHPLAN_URL", help="service URL (with --plan-id)")
    ] = "http://127.0.0.1:8000",
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="MESHPLAN_API_KEY", help="service API key")
    ] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", help="node count")] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node")] = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", help="comma-separated host names, node 0 first")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="container image")] = None,
    workdir: Annotated[str, typer.Option("--workdir", help="working directory")] = "",
    port: Annotated[int, typer.Option("--port", help="rendezvous port")] = 29500,
    rdzv_id: Annotated[str | None, typer.Option("--rdzv-id")] = None,
    max_restarts: Annotated[int, typer.Option("--max-restarts")] = 0,
    entry_module: Annotated[
        str | None, typer.Option("--module", help="python module to run")
    ] = None,
    entry_script: Annotated[str | None, typer.Option("--script", help="script to run")] = None,
    arg: Annotated[
        list[str] | None, typer.Option("--arg", help="extra trainer argument (repeat)")
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="training steps")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeat)")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="Slurm partition")] = None,
    account: Annotated[str | None, typer.Option("--account", help="Slurm account")] = None,
    time: Annotated[str, typer.Option("--time", help="Slurm time limit")] = "01:00:00",
    job_name: Annotated[
        str, typer.Option("--job-name", help="Slurm / Kubernetes name")
    ] = "meshplan",
    namespace: Annotated[str, typer.Option("--namespace", help="Kubernetes namespace")] = "default",
    elastic: Annotated[bool, typer.Option("--elastic", help="PyTorchJob elasticPolicy")] = False,
    out_dir: Annotated[
        Path | None, typer.Option("-o", "--output", help="write the files here")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help='print {"files","commands","notes"}')
    ] = False,
) -> None:
    """Launch configs for a plan: one torchrun command per node, an sbatch script, or Kubeflow
    manifests, with the arguments of the chosen training framework."""
    if (plan_file is None) == (plan_id is None):
        fail("give exactly one of --plan-file or --plan-id", as_json=as_json)
    if plan_file is not None:
        doc = expect(read_json_file(str(plan_file)), "plan", str(plan_file))
    else:
        assert plan_id is not None
        doc = fetch_plan_document(url, plan_id, api_key, as_json=as_json)
    try:
        plan = plan_from_document(doc)
        deployment = Deployment(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            hosts=tuple(h.strip() for h in hosts.split(",") if h.strip()) if hosts else (),
            image=image,
            workdir=workdir,
            port=port,
            rdzv_id=rdzv_id,
            max_restarts=max_restarts,
            entry_module=entry_module,
            entry_script=entry_script,
            entry_args=tuple(arg or ()),
            steps=steps,
            env=_env_pairs(env or []),
            partition=partition,
            account=account,
            time=time,
            job_name=job_name,
            namespace=namespace,
            elastic=elastic,
        )
    except ValidationError as exc:
        message = describe_validation(exc)
        fail(message, as_json=as_json, doc={"error": "invalid input", "detail": message})
    try:
        stored = stored_gpus_per_node(doc.get("request")) if isinstance(doc, dict) else None
        deployment = fit_cluster(plan, deployment, gpus_per_node=stored)
        bundle = render(plan, deployment, target=target, framework=framework)
    except UnsupportedPlanError as exc:
        summary = summarise(exc.framework, exc.reasons, pp=plan.pp)
        fail(
            one_line(summary),
            code=3,
            as_json=as_json,
            doc={"error": "unsupported plan", "framework": exc.framework, **summary},
        )
    except SpecError as exc:
        fail(str(exc), as_json=as_json, doc={"error": str(exc), "field": exc.field})
    written = write_files(bundle, out_dir) if out_dir is not None else []
    announce(written, as_json=as_json)
    if as_json:
        emit_json(bundle.model_dump(mode="json"))
        return
    if not written:
        for f in bundle.files:
            typer.echo(f"# ---- {f.name} (mode {f.mode:o})")
            typer.echo(f.content.rstrip("\n"))
    typer.echo("# commands:")
    for command in bundle.commands:
        typer.echo(command)
    for note in bundle.notes:
        typer.echo(f"# note: {note}")


def register(app: typer.Typer) -> None:
    app.command("launch")(launch)


__all__ = ["fetch_plan_document", "launch", "plan_from_document", "register", "write_files"]
