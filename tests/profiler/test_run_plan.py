"""The runner's plan loading and stage layout (fast), its RunReport from a real run, and the
torchrun command that `planner.launch.render(..., framework="meshplan")` emits, run as is."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from run_plan_support import child_env, free_port, make_plan, run_forked

from planner.cost import fixed_plan
from planner.launch.deployment import Deployment
from planner.launch.render import render
from planner.runreport import RunReport
from planner.specs.base import RecomputeMode, ScheduleName
from planner.specs.cluster import ClusterSpec
from planner.specs.request import Candidate, PlanRequest, ProfileRef, StageSpec
from planner.specs.training import TrainingSpec
from profiler.layer_profiler import ProfileOptions, profile_model
from profiler.layer_source import ModelSource
from profiler.models import tiny_arch
from profiler.runner.mesh import init_mesh
from profiler.runner.options import load_plan
from profiler.runner.split import local_stages, stage_layout

GPT = tiny_arch("gpt", num_layers=4)


def test_load_plan_accepts_bare_cli_and_service_documents(tmp_path: Path) -> None:
    plan = make_plan(GPT, pp=2)
    doc = json.loads(plan.model_dump_json())
    forms = {
        "bare": (doc, None),
        "cli": ({"plan": doc, "alternatives": [], "search": {}}, None),
        "service": ({"id": "pl_123", "status": "done", "result": {"plan": doc}}, "pl_123"),
    }
    for name, (body, want_id) in forms.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(body))
        loaded, plan_id = load_plan(path)
        assert loaded == plan, name
        assert plan_id == want_id, name


def test_load_plan_rejects_other_documents(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"model": {"family": "gpt"}}))
    with pytest.raises(ValueError, match="not a plan document"):
        load_plan(path)


def test_stage_layout_uneven_and_v_shape() -> None:
    plan = make_plan(GPT, pp=2, stages=(StageSpec(layers=(0, 2)), StageSpec(layers=(2, 6))))
    first, last = stage_layout(plan)
    assert (first.has_embedding, first.blocks, first.has_head) == (True, (0,), False)
    assert (last.has_embedding, last.blocks, last.has_head) == (False, (1, 2, 3), True)
    zbv = make_plan(GPT, pp=2, vpp=2, schedule="zbv")
    assert [s.index for s in local_stages(zbv, 0)] == [0, 3]
    assert [s.index for s in local_stages(zbv, 1)] == [1, 2]
    looped = make_plan(GPT, pp=2, vpp=2, schedule="interleaved-1f1b")
    assert [s.index for s in local_stages(looped, 0)] == [0, 2]


def test_stage_layout_rejects_a_plan_for_another_model() -> None:
    plan = make_plan(GPT, pp=2)
    other = plan.model_copy(update={"arch": tiny_arch("gpt", num_layers=6)})
    with pytest.raises(ValueError, match="stages end at layer 6 but the model has 8 layers"):
        stage_layout(other)


@pytest.mark.slow
def test_report_measures_every_stage(tmp_path: Path) -> None:
    """Activation bytes: full recompute on stage 1's blocks keeps only their inputs, so stage 1
    saves far less than with no recompute; 1F1B holds more micro-batches on stage 0."""
    stages = (
        StageSpec(layers=(0, 3), recompute=("none", "none", "none")),
        StageSpec(layers=(3, 6), recompute=("full", "full", "none")),
    )
    runs = {}
    for name, spec in {"full": stages, "none": None}.items():
        plan = make_plan(
            GPT,
            pp=2,
            schedule="1f1b",
            stages=spec or (StageSpec(layers=(0, 3)), StageSpec(layers=(3, 6))),
        )
        out = tmp_path / name
        out.mkdir()
        run_forked(plan, out, "--report", str(out / "report.json"), "--steps", "2")
        runs[name] = RunReport.model_validate_json((out / "report.json").read_text())
    rep = runs["none"]
    assert (rep.pp, rep.dp, rep.tp, rep.steps, rep.schedule) == (2, 1, 1, 2, "1f1b")
    assert len(rep.step_times_s) == 2 and rep.step_time_s > 0
    assert 0.0 <= rep.bubble_fraction < 1.0
    assert [s.stage for s in rep.stages] == [0, 1] and [s.rank for s in rep.stages] == [0, 1]
    assert all(s.busy_s > 0 and s.activation_bytes > 0 for s in rep.stages)
    assert all(s.peak_memory_bytes > s.activation_bytes for s in rep.stages)
    assert rep.loss is not None and 3.0 < rep.loss < 6.0  # ~ln(128) = 4.85 for random labels
    # 1F1B: stage 0 holds min(pp, m) = 2 micro-batches of 2 blocks + embedding, stage 1 one
    # micro-batch of 2 blocks + head: stage 0 saves more.
    assert rep.stages[0].activation_bytes > rep.stages[1].activation_bytes
    assert runs["full"].stages[1].activation_bytes < 0.5 * rep.stages[1].activation_bytes
    assert runs["full"].stages[0].activation_bytes == rep.stages[0].activation_bytes


@pytest.mark.slow
def test_the_emitted_torchrun_command_runs(tmp_path: Path) -> None:
    """`render(plan, Deployment(...), target="torchrun", framework="meshplan")`: write its files,
    run commands[0] with bash, unchanged; the rendezvous port comes from Deployment.port."""
    plan = make_plan(GPT, pp=2, schedule="gpipe")
    dep = Deployment(
        port=free_port(),
        steps=2,
        entry_args=("--warmup", "1", "--report", "report.json", "--quiet"),
    )
    bundle = render(plan, dep, target="torchrun", framework="meshplan")
    for f in bundle.files:
        (tmp_path / f.name).write_text(f.content)
    assert len(bundle.commands) == 1
    command = bundle.commands[0]
    assert "torchrun" in command and "-m profiler.run_plan" in command
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = RunReport.model_validate_json((tmp_path / "report.json").read_text())
    assert (report.pp, report.steps, report.warmup_steps) == (2, 2, 1)
    assert report.schedule == "gpipe" and len(report.stages) == 2


class _Recorder(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers.get("Authorization", ""), body))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": "run_1"}')

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.mark.slow
def test_report_is_posted_to_the_service_url(tmp_path: Path) -> None:
    """--report-url/--api-key: POST {url}/v1/plans/{id}/runs with a bearer key and the
    RunReport body; the id comes from the service's stored-plan document."""
    plan = make_plan(GPT, pp=2, schedule="1f1b")
    doc = {"id": "pl_abc", "result": {"plan": json.loads(plan.model_dump_json())}}
    (tmp_path / "stored.json").write_text(json.dumps(doc))
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        run_forked(
            plan,
            tmp_path,
            "--report-url", url, "--api-key", "k-secret", "--plan", str(tmp_path / "stored.json"),
        )  # fmt: skip
    finally:
        server.shutdown()
    assert len(_Recorder.received) == 1
    path, auth, body = _Recorder.received[0]
    assert path == "/v1/plans/pl_abc/runs"
    assert auth == "Bearer k-secret"
    report = RunReport.model_validate_json(body)
    assert report.plan_id == "pl_abc" and report.pp == 2 and len(report.stages) == 2


def test_world_size_must_match_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(GPT, pp=2, dp=2)
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match=r"WORLD_SIZE=3 but the plan needs pp\(2\) \* dp\(2\)"):
        init_mesh(plan, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("schedule", "vpp", "recompute"),
    [
        ("1f1b", 1, "none"),
        ("gpipe", 1, "selective"),
        ("interleaved-1f1b", 2, "full"),
        ("zb-h1", 1, "none"),
        ("zbv", 2, "none"),
    ],
)
def test_activation_bytes_match_the_plan_from_a_measured_profile(
    tmp_path: Path, schedule: ScheduleName, vpp: int, recompute: RecomputeMode
) -> None:
    """Plan from the profiler's measured profile; every stage's measured peak of saved
    activations is within 5 % of the plan's (in-flight micro-batches x per-layer bytes).
    Three steps: the split backward of the zero-bubble schedules retains graphs, and the meter
    must neither keep them alive nor count them twice."""
    source = ModelSource(name="tiny", seq_length=16, arch=GPT)
    options = ProfileOptions(micro_batch_sizes=(2,), repeats=1, warmup=0)
    profile = profile_model(source, options).profile
    request = PlanRequest(
        model=ProfileRef(profile=profile),
        cluster=ClusterSpec(gpu="CPU", num_gpus=2),
        training=TrainingSpec(global_batch_size=8, seq_length=16, dtype="fp32"),
    )
    candidate = Candidate(pp=2, vpp=vpp, schedule=schedule, micro_batch_size=2, recompute=recompute)
    plan = fixed_plan(request, candidate).model_copy(update={"arch": GPT})
    run_forked(plan, tmp_path, "--report", str(tmp_path / "r.json"), "--steps", "3")
    report = RunReport.model_validate_json((tmp_path / "r.json").read_text())
    for predicted, measured in zip(plan.prediction.stages, report.stages, strict=True):
        assert measured.stage == predicted.stage
        error = measured.activation_bytes / predicted.activation_bytes - 1
        assert abs(error) < 0.05, (predicted.stage, predicted.activation_bytes, measured)
