"""`meshplan profile` (per-layer time and memory) and `meshplan profile-network` (links).

Both run the torch side (`profiler/`), imported only when a command runs so that the rest of
the CLI works without torch. `profile-network` starts `torchrun … -m profiler.network` as a
subprocess and reads back the JSON it writes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from api.cli.files import write_output
from api.cli.output import describe_validation, emit_json, fail, stderr
from api.cli.progress import show_progress
from api.cli.spread import spread_warning

MODEL_HELP = (
    "gpt:num_layers=…,hidden_size=…,num_attention_heads=…,vocab_size=… | llama:…"
    "(num_kv_heads, ffn_hidden_size) | module=package.module:factory"
)


def _ints(option: str, text: str, *, as_json: bool) -> tuple[int, ...]:
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        fail(f"{option}={text!r}: expected a comma list of integers", as_json=as_json)
    if not values or min(values) < 1:
        fail(f"{option}={text!r}: expected positive integers", as_json=as_json)
    return values


def _fmt_s(value_s: float) -> str:
    return f"{value_s * 1e3:9.3f}"


def _fmt_mib(value_bytes: float) -> str:
    return f"{value_bytes / 2**20:9.3f}"


def _print_profile(profile: Any) -> None:
    typer.echo(
        f"{profile.name}: {len(profile.layers)} layers, seq {profile.seq_length}, "
        f"{profile.dtype} on {profile.device_name} (torch {profile.torch_version})"
    )
    typer.echo(
        "  tp  mbs  kind        fw ms   bw_in ms    bw_w ms  resel ms  act none MiB  "
        "act sel MiB  act full MiB   params   GFLOP   spread(fw)"
    )
    for point in profile.points:
        for kind, c in point.kinds.items():
            spread = (c.spread or {}).get("fw_s", 0.0)
            typer.echo(
                f"{point.tp:4d} {point.micro_batch_size:4d}  {kind:10s}"
                f"{_fmt_s(c.fw_s)}  {_fmt_s(c.bw_input_s)}  {_fmt_s(c.bw_weight_s)} "
                f"{_fmt_s(c.recompute_s.selective)}  {_fmt_mib(c.activation_bytes.none):>12s}"
                f" {_fmt_mib(c.activation_bytes.selective):>12s} "
                f"{_fmt_mib(c.activation_bytes.full):>12s} {c.param_count:8.3g} "
                f"{c.fw_flops / 1e9:7.3g}   {spread:.1%}"
            )


def profile(
    model: Annotated[str, typer.Option(help=MODEL_HELP)],
    seq_length: Annotated[int, typer.Option(min=1, help="sequence length")],
    micro_batch_sizes: Annotated[str, typer.Option(help="comma list, e.g. 1,2,4")] = "1,2",
    tp: Annotated[str, typer.Option(help="tp degrees to profile (one rank's shapes)")] = "1",
    dtype: Annotated[
        str | None, typer.Option(help="bf16 | fp16 | fp32 (default: bf16 on cuda, fp32 on cpu)")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cuda | cpu (default: cuda if any)")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="timed rounds per measurement")] = 10,
    warmup: Annotated[int, typer.Option(min=0, help="untimed rounds first")] = 2,
    seed: Annotated[int, typer.Option(help="seed of weights and inputs")] = 0,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="CPU: processes (ranks) that will share this host's cores; times are scaled "
            "by the measured slowdown of K copies of the model's fw+bw running together",
        ),
    ] = 1,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write JSON")] = None,
    upload: Annotated[str | None, typer.Option(help="service URL: POST /v1/profiles")] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="MESHPLAN_API_KEY", help="API key for --upload")
    ] = None,
    progress: Annotated[
        bool | None,
        typer.Option(help="progress bar on stderr (default: when stderr is a terminal)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Measure per-layer time and memory on this machine -> a ModelProfile."""
    mbs = _ints("--micro-batch-sizes", micro_batch_sizes, as_json=as_json)
    tps = _ints("--tp", tp, as_json=as_json)
    if upload and not api_key:
        fail("--upload needs --api-key (or MESHPLAN_API_KEY)", as_json=as_json)
    try:
        import torch

        from profiler.layer_profiler import ProfileOptions, parse_dtype, profile_model
        from profiler.layer_source import ModelSource
    except ImportError as exc:
        fail(f"the profiler needs torch: pip install 'meshplan[profiler]' ({exc})", as_json=as_json)
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        source = ModelSource.from_spec(model, seq_length=seq_length)
        options = ProfileOptions(
            micro_batch_sizes=mbs,
            tp_degrees=tps,
            dtype=parse_dtype(dtype or ("bf16" if dev.startswith("cuda") else "fp32")),
            device=dev,
            repeats=repeats,
            warmup=warmup,
            seed=seed,
            progress=show_progress(as_json=as_json, requested=progress),
            concurrency=concurrency,
        )
        result = profile_model(source, options)
    except ValidationError as exc:
        fail(f"--model {model!r}: {describe_validation(exc)}", as_json=as_json)
    except (ValueError, TypeError, ImportError, AttributeError, RuntimeError) as exc:
        fail(str(exc), as_json=as_json)
    prof = result.profile
    if output is not None:
        write_output(
            output, json.dumps(prof.model_dump(mode="json"), indent=2) + "\n", as_json=as_json
        )
    warning = spread_warning(prof)
    profile_id: str | None = None
    if upload:
        from profiler.upload import UploadError, upload_profile

        try:
            assert api_key is not None
            profile_id = upload_profile(prof, url=upload, api_key=api_key).profile_id
        except UploadError as exc:
            fail(str(exc), code=1, as_json=as_json)
    if as_json:
        emit_json(
            {
                "profile": prof.model_dump(mode="json"),
                "profile_id": profile_id,
                "output": str(output) if output else None,
                "warnings": [warning] if warning else [],
            }
        )
        return
    _print_profile(prof)
    if warning:
        typer.echo(f"warning: {warning}", err=True)
    if profile_id:
        typer.echo(f"uploaded: profile_id {profile_id}")


def _repo_root_env() -> dict[str, str]:
    """The environment for torchrun's workers, with `profiler` importable."""
    env = dict(os.environ)
    spec = importlib.util.find_spec("profiler")
    if spec is not None and spec.origin:
        root = str(Path(spec.origin).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return env


def profile_network(
    nproc_per_node: Annotated[int, typer.Option(min=2, help="ranks on this node")] = 2,
    nnodes: Annotated[int, typer.Option(min=1, help="nodes (run this on each)")] = 1,
    node_rank: Annotated[int, typer.Option(min=0)] = 0,
    rdzv_endpoint: Annotated[
        str | None, typer.Option(help="host:port of node 0 (needed with --nnodes > 1)")
    ] = None,
    ranks_per_node: Annotated[
        int | None, typer.Option(help="pretend every K ranks form a node (test across-node)")
    ] = None,
    sizes: Annotated[str | None, typer.Option(help="message sizes, e.g. 1k,64k,1m")] = None,
    ops: Annotated[str | None, typer.Option(help="all_reduce,all_gather,…")] = None,
    backend: Annotated[str | None, typer.Option(help="nccl | gloo (default: by device)")] = None,
    gpu: Annotated[str | None, typer.Option(help="catalog GPU: also emit a ClusterSpec")] = None,
    iters: Annotated[int, typer.Option(min=1)] = 5,
    repeats: Annotated[int, typer.Option(min=1)] = 3,
    timeout_s: Annotated[float, typer.Option(help="give up after this long")] = 600.0,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write JSON")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Measure collective bandwidth and latency with torchrun -> ClusterSpec link figures."""
    if nnodes > 1 and not rdzv_endpoint:
        fail("--nnodes > 1 needs --rdzv-endpoint host:port", as_json=as_json)
    with tempfile.TemporaryDirectory() as tmp:
        out_path = Path(tmp) / "network.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}"]
        if nnodes > 1:
            cmd += [
                f"--nnodes={nnodes}",
                f"--node-rank={node_rank}",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rdzv_endpoint}",
            ]
        else:
            cmd += ["--standalone"]
        cmd += ["-m", "profiler.network", "-o", str(out_path)]
        cmd += [f"--iters={iters}", f"--repeats={repeats}"]
        for flag, value in (
            ("--ranks-per-node", ranks_per_node),
            ("--sizes", sizes),
            ("--ops", ops),
            ("--backend", backend),
            ("--gpu", gpu),
        ):
            if value is not None:
                cmd += [flag, str(value)]
        try:
            proc = subprocess.run(
                cmd, env=_repo_root_env(), capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            fail(f"torchrun did not finish in {timeout_s:g} s", code=1, as_json=as_json)
        if proc.returncode != 0 or not out_path.exists():
            if node_rank != 0 and proc.returncode == 0:
                typer.echo("done (node rank != 0: the figures are written on node 0)")
                return
            stderr(proc.stderr[-4000:])
            fail(f"torchrun exited with {proc.returncode}", code=1, as_json=as_json)
        doc = json.loads(out_path.read_text())
    if output is not None:
        write_output(output, json.dumps(doc, indent=2) + "\n", as_json=as_json)
    if as_json:
        emit_json(doc)
        return
    links = doc["links"]
    typer.echo(
        f"{doc['backend']} on {doc['world_size']} ranks ({doc['nnodes']} node(s) x "
        f"{doc['ranks_per_node']}), {doc['device_name']}"
    )
    for key, value in links.items():
        shown = "not measured" if value is None else f"{value:.4g}"
        typer.echo(f"  {key:22s} {shown}")


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
    app.command("profile-network")(profile_network)
