"""Plans of several shapes, built directly (no search), for the launch emitter tests."""

from __future__ import annotations

from collections.abc import Sequence

from planner.plan import Plan, Prediction
from planner.specs.base import RecomputeMode, ScheduleName
from planner.specs.model import ModelArch
from planner.specs.request import StageSpec

LLAMA_8B = ModelArch(
    family="llama",
    name="llama3-8b",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    ffn_hidden_size=14336,
    vocab_size=128256,
)
GPT_1B = ModelArch(
    family="gpt",
    name="gpt-1.3b",
    num_layers=24,
    hidden_size=2048,
    num_attention_heads=16,
    vocab_size=51200,
)


def prediction(step_time_s: float = 2.0) -> Prediction:
    return Prediction(
        step_time_s=step_time_s,
        pipeline_s=step_time_s * 0.9,
        dp_sync_s=step_time_s * 0.05,
        optimizer_s=step_time_s * 0.05,
        tokens_per_s=1.0e5,
        mfu=0.45,
        model_tflops_per_gpu=440.0,
        hardware_tflops_per_gpu=480.0,
        bubble_fraction=0.1,
        peak_memory_bytes=60e9,
        memory_cap_bytes=79e9,
        margin_bytes=19e9,
        feasible=True,
        stages=(),
        ranks=(),
    )


def even_stages(total_layers: int, n: int) -> list[tuple[int, int]]:
    """n contiguous ranges over total_layers, the first ones one longer when it does not divide."""
    q, r = divmod(total_layers, n)
    out, first = [], 0
    for i in range(n):
        end = first + q + (1 if i < r else 0)
        out.append((first, end))
        first = end
    return out


def make_plan(
    *,
    arch: ModelArch | None = LLAMA_8B,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    vpp: int = 1,
    schedule: ScheduleName = "1f1b",
    mbs: int = 1,
    gbs: int = 64,
    seq: int = 4096,
    zero: int = 0,
    sp: bool = False,
    recompute: RecomputeMode = "none",
    stages: Sequence[tuple[int, int]] | None = None,
    per_layer: Sequence[Sequence[str]] | None = None,
    num_decoders: int | None = None,
) -> Plan:
    n = arch.num_layers if arch is not None else (num_decoders or 32)
    ranges = list(stages) if stages is not None else even_stages(n + 2, pp * vpp)
    specs = tuple(
        StageSpec.model_validate(
            {"layers": r, "recompute": list(per_layer[i]) if per_layer is not None else None}
        )
        for i, r in enumerate(ranges)
    )
    if per_layer is None:
        specs = tuple(
            StageSpec(layers=s.layers, recompute=(recompute,) * s.num_layers) for s in specs
        )
    return Plan(
        model_name=arch.display_name if arch else "custom",
        model_hash="0123456789abcdef",
        arch=arch,
        gpu="H100-SXM-80GB",
        num_gpus=tp * cp * pp * dp,
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        etp=etp,
        vpp=vpp,
        schedule=schedule,
        micro_batch_size=mbs,
        num_microbatches=gbs // (mbs * dp),
        global_batch_size=gbs,
        seq_length=seq,
        zero_stage=zero,
        sequence_parallel=sp,
        recompute=recompute,
        stages=specs,
        prediction=prediction(),
        why=("test plan",),
    )


def ranges_from_decoders(counts: Sequence[int]) -> list[tuple[int, int]]:
    """Stage layer ranges over [embedding, decoders..., head] holding `counts` decoder blocks:
    the embedding joins stage 0 and the head the last stage."""
    out, first = [], 0
    for i, c in enumerate(counts):
        end = first + c + (1 if i == 0 else 0) + (1 if i == len(counts) - 1 else 0)
        out.append((first, end))
        first = end
    return out

