"""Per-layer profiler on CPU: exact saved-activation bytes, recompute modes, timings, kinds."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from typer.testing import CliRunner

from api.app import create_app
from api.cli import app as cli_app
from api.settings import Settings
from planner.specs import ModelProfile
from profiler.layer_profiler import (
    ProfileOptions,
    ProfileResult,
    full_recompute_stat,
    measure_layer,
    profile_model,
)
from profiler.layer_source import Layer, ModelSource
from profiler.models import build_model, tiny_arch
from profiler.saved_tensors import count_saved
from profiler.upload import UploadError, upload_profile

S = 16  # sequence length
FP32 = 4  # bytes per element


@pytest.fixture(scope="module")
def gpt_result() -> ProfileResult:
    source = ModelSource.from_spec(
        "gpt:num_layers=3,hidden_size=64,num_attention_heads=4,vocab_size=128", seq_length=S
    )
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return profile_model(
            source, ProfileOptions(micro_batch_sizes=(1, 2, 4), repeats=3, warmup=1)
        )


def _gpt_block_saved_terms(b: int, s: int, h: int, a: int, f: int) -> list[int]:
    """Storages a pre-LN GPT block (no dropout) saves for backward, from first principles, in
    bytes (fp32). Weights and biases are parameters and not counted.

    attention half:
      LayerNorm 1: its input x [b,s,h], mean and rstd [b,s,1] each
      q/k/v projections: their common input, the LayerNorm output [b,s,h] (one storage)
      attention core (flash kernel): q, k, v [b,a,s,h/a] (each its projection's output
        storage, [b,s,h]), the output [b,a,s,h/a] and the fp32 log-sum-exp [b,a,s]
      output projection: its input, the core output reshaped to [b,s,h] (a view: no storage)
      residual add: nothing
    MLP half:
      LayerNorm 2: its input (the residual sum) [b,s,h], mean and rstd [b,s,1]
      fc1: its input, the LayerNorm output [b,s,h]
      GELU: its input, the fc1 output [b,s,f]
      fc2: its input, the GELU output [b,s,f]
    """
    bsh, bs1, bsf = b * s * h * FP32, b * s * FP32, b * s * f * FP32
    lse = b * a * s * FP32
    attention = [bsh, bs1, bs1, bsh, bsh, bsh, bsh, bsh, lse]
    mlp = [bsh, bs1, bs1, bsh, bsf, bsf]
    return attention + mlp


def test_gpt_block_saved_tensors_match_first_principles() -> None:
    arch = tiny_arch("gpt")  # h=64, a=4, f=256
    b = 2
    block = build_model(arch, seq_length=S).layers[0]
    params = [*block.parameters(), *block.buffers()]
    x = torch.randn(b, S, 64, requires_grad=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out, saved = count_saved(lambda: block(x), exclude=params)
    expected = _gpt_block_saved_terms(b, S, 64, 4, 256)
    assert sorted(t.storage_bytes for t in saved.tensors) == sorted(expected)
    assert saved.activation_bytes == sum(expected)
    # 16 s*b*h elements: Korthikanti et al. 2022's 34 s*b*h bytes at 2 bytes/element, minus
    # the two 1-byte dropout masks this block does not have; the s^2 core terms become lse.
    assert saved.activation_bytes == 16 * b * S * 64 * FP32 + 4 * b * S * FP32 + b * 4 * S * FP32
    # parameters were saved too (each Linear's weight, each LayerNorm's weight and bias) and
    # were recognised as such: 4h^2 + 8h^2 weights + 4h norm parameters, fp32
    assert saved.param_bytes == (12 * 64 * 64 + 4 * 64) * FP32
    assert out.shape == x.shape


def test_profile_decoder_bytes_per_mode_from_first_principles(gpt_result: ProfileResult) -> None:
    for m in gpt_result.measurements:
        if m.kind != "decoder":
            continue
        b = m.micro_batch_size
        terms = _gpt_block_saved_terms(b, S, 64, 4, 256)
        lse = b * 4 * S * FP32
        acts = m.cost.activation_bytes
        assert acts.none == sum(terms)
        # selective: the core's internals (here only the log-sum-exp) are recomputed; q, k, v
        # (the checkpoint's inputs) and the core output (o_proj's input) are still kept
        assert acts.selective == sum(terms) - lse
        # full recompute keeps only the layer input [b, s, h]
        assert acts.full == b * S * 64 * FP32
        assert [t.shape for t in m.saved["full"].tensors] == [(b, S, 64)]


def test_saved_bytes_grow_linearly_with_micro_batch(gpt_result: ProfileResult) -> None:
    by = {(m.kind, m.micro_batch_size): m.cost for m in gpt_result.measurements}
    for kind in ("embedding", "decoder", "head"):
        for mode in ("none", "selective", "full"):
            a1, a2, a4 = (by[(kind, b)].activation_bytes.get(mode) for b in (1, 2, 4))
            assert a2 > a1 > 0
            # affine in b (the head's loss keeps one 4-byte scalar whatever b is)
            assert a4 - a2 == pytest.approx(2 * (a2 - a1))
            assert a1 - (a2 - a1) <= 4  # intercept at most that scalar
        assert by[(kind, 4)].output_bytes >= by[(kind, 1)].output_bytes
    # the decoder's bytes are exactly proportional
    assert by[("decoder", 4)].activation_bytes.none == 4 * by[("decoder", 1)].activation_bytes.none


def test_timings_positive_with_spread(gpt_result: ProfileResult) -> None:
    for m in gpt_result.measurements:
        c = m.cost
        assert c.fw_s > 0
        assert c.bw_s > 0
        assert c.recompute_s.none == 0
        # full recompute: checkpoint_wrapper's forward + backward minus the plain layer's,
        # measured (not copied from fw_s)
        assert c.recompute_s.full > 0
        assert c.spread is not None and "recompute_full_s" in c.spread
        assert len(m.stats["recompute_full_s"].samples_s) == 3
        # I and W through torch's split-backward functions, as a zb-h1 / zbv stage runs them
        assert c.split_bw_input_s is not None and c.split_bw_weight_s is not None
        assert len(m.stats["split_bw_weight_s"].samples_s) == 3
        assert c.spread is not None and "fw_s" in c.spread and "bw_s" in c.spread
        assert all(v >= 0 for v in c.spread.values())
        assert len(m.stats["fw_s"].samples_s) == 3
        if m.kind == "decoder":
            assert c.bw_input_s > 0
            assert c.split_bw_input_s > 0 and c.split_bw_weight_s > 0
            assert len(m.stats["split_bw_input_s"].samples_s) == 3
            assert c.recompute_s.selective > 0
            assert "recompute_selective_s" in c.spread
        if m.kind == "embedding":  # token ids have no gradient: all of B is weight gradient
            assert c.bw_input_s == 0 and c.bw_weight_s > 0
            # torch's first stage: its split I does nothing, its W is the full backward
            assert c.split_bw_input_s == 0 and c.split_bw_weight_s == c.bw_weight_s


def test_full_recompute_is_at_least_the_forward_on_a_loaded_machine() -> None:
    """Paired rounds as a loaded machine gave them: in two of three rounds the plain
    layer's forward + backward came out slower than the checkpointed one's, so the
    differences are negative there. The checkpoint still re-ran the forward inside its
    backward: what full recompute adds is at least the forward measured (never 0)."""
    plain_s = [0.0112, 0.0094, 0.0131]
    ckpt_s = [0.0105, 0.0121, 0.0118]  # round 1: 2.7 ms more; rounds 0 and 2: less
    forward_s = 0.0021
    stat = full_recompute_stat(plain_s, ckpt_s, forward_s=forward_s)
    assert stat.samples_s == pytest.approx((forward_s, 0.0027, forward_s))
    assert stat.median_s == pytest.approx(forward_s)
    # rounds that show more than a forward keep what they measured
    more = full_recompute_stat([0.010, 0.010, 0.010], [0.014, 0.015, 0.013], forward_s=0.002)
    assert more.median_s == pytest.approx(0.004)


def test_profile_is_a_measured_model_profile(gpt_result: ProfileResult) -> None:
    p = gpt_result.profile
    again = ModelProfile.model_validate_json(p.model_dump_json())
    assert again == p
    assert p.source == "measured" and p.dtype == "fp32" and p.seq_length == S
    assert p.torch_version == torch.__version__ and p.measured_at
    assert [ref.name for ref in p.layers] == [
        "embedding",
        "decoder.0",
        "decoder.1",
        "decoder.2",
        "head",
    ]
    assert p.micro_batch_sizes == (1, 2, 4) and p.tp_degrees == (1,)
    dec = p.cost("decoder", micro_batch_size=2, tp=1)
    h, f = 64, 256
    assert dec.param_count == 12 * h * h + 13 * h  # Narayanan 2021 Eq. 2 per layer (f = 4h)
    assert dec.param_bytes == dec.param_count * FP32
    assert dec.output_bytes == 2 * S * h * FP32
    # measured FLOPs: 2 per multiply-add of the four h x h and two h x f matmuls, plus
    # QK^T and scores x V (2 b s^2 h each), Korthikanti 2022 §6
    b = 2
    assert dec.fw_flops == 2 * b * S * (4 * h * h + 2 * h * f) + 4 * b * S * S * h
    assert dec.tp_comm_bytes == 0  # tp = 1


def test_tp_rank_shapes() -> None:
    source = ModelSource.from_spec(
        "llama:num_layers=2,hidden_size=64,num_attention_heads=4,num_kv_heads=2,"
        "ffn_hidden_size=128,vocab_size=128",
        seq_length=S,
    )
    result = profile_model(
        source, ProfileOptions(micro_batch_sizes=(1,), tp_degrees=(1, 2), repeats=1, warmup=0)
    )
    d1 = result.profile.cost("decoder", micro_batch_size=1, tp=1)
    d2 = result.profile.cost("decoder", micro_batch_size=1, tp=2)
    h, f = 64, 128
    # llama: q and o h x h, k and v h x h/2 (2 of 4 heads), SwiGLU 3 h x f, two RMSNorms h
    assert d1.param_count == 2 * h * h + 2 * h * h // 2 + 3 * h * f + 2 * h
    assert d2.param_count == (2 * h * h + 2 * h * h // 2 + 3 * h * f) // 2 + 2 * h
    assert d2.fw_flops < d1.fw_flops
    assert d2.tp_comm_bytes == 4 * S * h * FP32  # Megatron: 4 all-reduces of b*s*h
    assert d2.activation_bytes.full == d1.activation_bytes.full == S * h * FP32


def _chain_factory(*, seq_length: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Embedding(100, 32), nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 8)
    )


def test_user_chain_kinds_and_bytes() -> None:
    source = ModelSource(name="chain", seq_length=S, factory=_chain_factory)
    result = profile_model(source, ProfileOptions(micro_batch_sizes=(2,), repeats=1, warmup=0))
    kinds = [ref.kind for ref in result.profile.layers]
    assert kinds == ["embedding", "linear", "linear", "linear_1"]  # identical layers share a kind
    by = {m.kind: m for m in result.measurements}
    assert len(result.measurements) == 3
    # a Linear saves its input [b, s, 32] only (the weight is a parameter)
    assert by["linear"].cost.activation_bytes.none == 2 * S * 32 * FP32
    assert by["linear_1"].cost.output_bytes == 2 * S * 8 * FP32
    assert by["linear"].cost.param_count == 32 * 32 + 32


def test_user_factory_needs_tp_keyword_for_tp() -> None:
    source = ModelSource(name="chain", seq_length=S, factory=_chain_factory)
    with pytest.raises(ValueError, match="takes no `tp` keyword"):
        profile_model(source, ProfileOptions(micro_batch_sizes=(1,), tp_degrees=(2,), repeats=1))


def test_measure_layer_head_full_keeps_input_and_labels() -> None:
    model: Any = build_model(tiny_arch("gpt"), seq_length=S)
    x = torch.randn(2, S, 64)
    labels = torch.randint(0, 128, (2, S))
    m = measure_layer(
        Layer("head", "head", model.head, takes_labels=True),
        x,
        labels,
        device=torch.device("cpu"),
        repeats=1,
        warmup=0,
    )
    assert m.cost.activation_bytes.full == 2 * S * 64 * FP32 + 2 * S * 8  # x and int64 labels
    assert m.cost.output_bytes == FP32  # the scalar loss


TINY_GPT = "gpt:num_layers=2,hidden_size=64,num_attention_heads=4,vocab_size=128"


def test_cli_profile_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "1,2"]
    args += ["--tp", "1,2", "--repeats", "2", "--warmup", "0", "--device", "cpu"]
    result = CliRunner().invoke(cli_app, [*args, "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    prof = ModelProfile.model_validate(doc["profile"])
    assert prof == ModelProfile.model_validate_json(out.read_text())
    assert doc["profile_id"] is None
    assert prof.source == "measured" and prof.dtype == "fp32"
    assert {(p.micro_batch_size, p.tp) for p in prof.points} == {(1, 1), (2, 1), (1, 2), (2, 2)}
    assert [r.kind for r in prof.layers] == ["embedding", "decoder", "decoder", "head"]
    assert prof.arch is not None and prof.arch.num_layers == 2
    # the human-readable form prints one row per kind and point
    text = CliRunner().invoke(cli_app, [*args, "--no-progress"])
    assert text.exit_code == 0, text.output
    assert sum(" decoder " in line for line in text.output.splitlines()) == 4


def test_cli_profile_reports_bad_model_fields() -> None:
    result = CliRunner().invoke(
        cli_app,
        ["profile", "--model", "gpt:num_layers=2,hidden_size=60,num_attention_heads=8,"
         "vocab_size=128", "--seq-length", "8", "--json"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "num_attention_heads=8 must divide hidden_size=60" in result.output
    result = CliRunner().invoke(cli_app, ["profile", "--model", "bert:x=1", "--seq-length", "8"])
    assert result.exit_code == 2
    assert "expected gpt:" in result.output


ADMIN_KEY = "profiler-test-admin-key-0123456789"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'svc.db'}",
        bootstrap_admin_key=ADMIN_KEY,
        solver_workers=1,
        max_time_limit_s=20.0,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_upload_to_the_service_and_read_back(
    service: TestClient, gpt_result: ProfileResult
) -> None:
    prof = gpt_result.profile
    up = upload_profile(prof, url=str(service.base_url), api_key=ADMIN_KEY, client=service)
    assert up.status_code == 201 and up.profile_id
    got = service.get(
        f"/v1/profiles/{up.profile_id}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert got.status_code == 200
    assert ModelProfile.model_validate(got.json()["profile"]) == prof
    with pytest.raises(UploadError) as info:
        upload_profile(prof, url=str(service.base_url), api_key="wrong-key", client=service)
    assert info.value.status_code == 401


@pytest.fixture
def live_url(tmp_path: Path) -> Iterator[str]:
    """The service under a real uvicorn on a free loopback port (SQLite)."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'live.db'}",
        bootstrap_admin_key=ADMIN_KEY,
        solver_workers=1,
        max_time_limit_s=20.0,
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_cli_profile_uploads_to_a_live_service(live_url: str) -> None:
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "1"]
    args += ["--repeats", "1", "--warmup", "0", "--device", "cpu", "--json"]
    result = CliRunner().invoke(cli_app, [*args, "--upload", live_url, "--api-key", ADMIN_KEY])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["profile_id"]
    stored = httpx.get(
        f"{live_url}/v1/profiles/{doc['profile_id']}",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert stored.status_code == 200
    assert stored.json()["profile"] == doc["profile"]
    # a wrong key is reported, exit code 1
    bad = CliRunner().invoke(cli_app, [*args, "--upload", live_url, "--api-key", "nope" * 5])
    assert bad.exit_code == 1
    assert "401" in bad.output


def test_measured_profile_drives_the_cost_model_through_the_cli(tmp_path: Path) -> None:
    """A measured profile in a plan request: `meshplan evaluate` charges each pipeline rank
    the measured activation bytes of its layers times the micro-batches in flight."""
    prof_path = tmp_path / "p.json"
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "2"]
    args += ["--repeats", "1", "--warmup", "0", "--device", "cpu", "-o", str(prof_path)]
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    profile = json.loads(prof_path.read_text())
    request = {
        "model": {"profile": profile},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2},
        "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    costs = ModelProfile.model_validate(profile).points[0].kinds
    for mode in ("none", "full"):
        candidate = {
            "pp": 2,
            "micro_batch_size": 2,
            "schedule": "1f1b",
            "recompute": mode,
            "stages": [{"layers": [0, 2]}, {"layers": [2, 4]}],  # [emb, dec0] | [dec1, head]
        }
        (tmp_path / "candidate.json").write_text(json.dumps(candidate))
        result = CliRunner().invoke(
            cli_app,
            ["evaluate", "--request", str(tmp_path / "request.json"), "--candidate",
             str(tmp_path / "candidate.json"), "--json"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        pred = json.loads(result.output)
        assert pred["feasible"] and pred["step_time_s"] > 0
        acts = [r["memory"]["activations_bytes"] for r in pred["ranks"]]

        def saved(kind: str, m: str = mode) -> float:
            return costs[kind].activation_bytes.get(m)  # type: ignore[arg-type]

        # m = 8 / 2 = 4 micro-batches; 1F1B keeps min(p - s, m) in flight on stage s
        # (Narayanan et al. 2021 §2.2.1): 2 on stage 0, 1 on stage 1
        assert acts[0] == pytest.approx(2 * (saved("embedding") + saved("decoder")))
        assert acts[1] == pytest.approx(1 * (saved("decoder") + saved("head")))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_profile_records_peak_memory_above_saved_bytes() -> None:
    source = ModelSource.from_spec(TINY_GPT, seq_length=64)
    result = profile_model(
        source,
        ProfileOptions(
            micro_batch_sizes=(1, 2), dtype=torch.bfloat16, device="cuda", repeats=3, warmup=1
        ),
    )
    prof = result.profile
    assert prof.dtype == "bf16" and prof.device_name == torch.cuda.get_device_name()
    for m in result.measurements:
        assert m.peak_allocated_bytes is not None
        # everything saved for backward is resident at the peak of forward + backward
        assert m.peak_allocated_bytes >= m.cost.activation_bytes.none
        key = f"peak_allocated_bytes.{m.kind}.mbs{m.micro_batch_size}.tp1"
        assert prof.notes[key] == str(m.peak_allocated_bytes)
        assert m.cost.fw_s > 0 and m.cost.bw_s > 0


def test_plan_from_a_measured_profile_through_the_service(live_url: str) -> None:
    """meshplan profile --upload -> POST /v1/plans naming the profile_id -> a plan whose
    stage memory is the measured bytes of its layers."""
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "1"]
    args += ["--repeats", "1", "--warmup", "0", "--device", "cpu", "--json"]
    up = CliRunner().invoke(cli_app, [*args, "--upload", live_url, "--api-key", ADMIN_KEY])
    assert up.exit_code == 0, up.output
    doc = json.loads(up.output)
    profile = ModelProfile.model_validate(doc["profile"])
    request = {
        "model": {"profile_id": doc["profile_id"]},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 1, "gpus_per_node": 1},
        "training": {"global_batch_size": 2, "seq_length": 16, "dtype": "fp32"},
        "constraints": {"micro_batch_sizes": [1]},
        "search": {"time_limit_s": 10},
    }
    r = httpx.post(
        f"{live_url}/v1/plans",
        json=request,
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=60,
    )
    assert r.status_code == 201, r.text
    plan = r.json()["result"]["plan"]
    assert plan["model_hash"] == profile.model_hash
    assert (plan["tp"], plan["pp"], plan["dp"], plan["micro_batch_size"]) == (1, 1, 1, 1)
    (stage,) = plan["prediction"]["stages"]
    assert stage["layers"] == [0, len(profile.layers)]
    # one micro-batch in flight with pp = 1: the stage holds the measured saved bytes of each
    # of its layers under the recompute mode the plan chose for it
    costs = profile.points[0].kinds
    expected = sum(
        costs[ref.kind].activation_bytes.get(mode)
        for ref, mode in zip(profile.layers, stage["recompute"], strict=True)
    )
    assert stage["peak_inflight"] == 1
    assert stage["activation_bytes"] == pytest.approx(expected)


def test_meshplan_plan_on_a_measured_profile(tmp_path: Path) -> None:
    """meshplan profile -o p.json; a request with {"model": {"profile": p}}; meshplan plan."""
    prof_path = tmp_path / "p.json"
    args = ["profile", "--model", TINY_GPT, "--seq-length", "16", "--micro-batch-sizes", "1,2"]
    args += ["--repeats", "1", "--warmup", "0", "--device", "cpu", "-o", str(prof_path)]
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    profile = ModelProfile.model_validate_json(prof_path.read_text())
    request = {
        "model": {"profile": json.loads(prof_path.read_text())},
        "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 2, "gpus_per_node": 2},
        "training": {"global_batch_size": 8, "seq_length": 16, "dtype": "fp32"},
        "constraints": {"pp": [2], "tp": [1]},
        "search": {"time_limit_s": 10},
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    result = CliRunner().invoke(
        cli_app, ["plan", "--request", str(tmp_path / "request.json"), "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    assert plan["model_hash"] == profile.model_hash
    assert (plan["tp"], plan["pp"]) == (1, 2)
    stages = plan["prediction"]["stages"]
    # pp * vpp contiguous stages covering every layer (the search may pick vpp = 2)
    assert len(stages) == plan["pp"] * plan["vpp"]
    starts = [s["layers"][0] for s in stages]
    ends = [s["layers"][1] for s in stages]
    assert starts == [0, *ends[:-1]]
    assert ends[-1] == len(profile.layers)
    mbs = plan["micro_batch_size"]
    for s in stages:
        first, end = s["layers"]
        # a stage holds, per micro-batch in flight, the measured bytes of its layers
        per_mb = sum(
            profile.cost(profile.layers[i].kind, micro_batch_size=mbs, tp=1).activation_bytes.get(
                mode
            )
            for i, mode in zip(range(first, end), s["recompute"], strict=True)
        )
        assert s["activation_bytes"] == pytest.approx(s["peak_inflight"] * per_mb)
