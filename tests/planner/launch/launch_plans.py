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
    cp_comm: str = "p2p",
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
        cp_comm=cp_comm,
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


# The published MoE / long-context configurations of /work/shared/cases/moe_cp.json, as Plans.
def mixtral_8x7b_64() -> Plan:
    """Megatron-LM's recommended Mixtral 8x7B: TP1 EP8 PP4 VP8 on 64 GPUs (dp 16), global
    batch 256 at 4,096 (megatron/core/transformer/moe/README.md)."""
    from planner.catalog.models import PRESETS

    return make_plan(arch=PRESETS["mixtral-8x7b"], tp=1, pp=4, vpp=8, dp=16, ep=8, zero=1,
                     schedule="interleaved-1f1b", gbs=256, seq=4096,
                     stages=ranges_from_decoders([1] * 32))  # fmt: skip


LLAMA3_405B = ModelArch(
    family="llama",
    name="llama3-405b",
    num_layers=126,
    hidden_size=16384,
    num_attention_heads=128,
    num_kv_heads=8,
    ffn_hidden_size=53248,
    vocab_size=128256,
)


def llama3_405b_cp16() -> Plan:
    """Llama 3 405B at 131,072 tokens: TP8 CP16 PP16 DP4 (Llama 3 paper, Table 4), 16M-token
    batches (128 sequences), K/V all-gathered (its §3.3.2); 7 + 8 x 14 + 7 blocks per stage."""
    return make_plan(arch=LLAMA3_405B, tp=8, cp=16, pp=16, dp=4, sp=True, zero=1, gbs=128,
                     seq=131072, stages=ranges_from_decoders([7] + [8] * 14 + [7]),
                     cp_comm="all_gather")  # fmt: skip


def deepseek_v3_2048() -> Plan:
    """DeepSeek-V3 on 2,048 GPUs: PP16 EP64, ZeRO-1, no TP (DeepSeek-V3 report §3.2)."""
    from planner.catalog.models import PRESETS

    return make_plan(arch=PRESETS["deepseek-v3"], pp=16, dp=128, ep=64, zero=1, gbs=4096,
                     stages=ranges_from_decoders([4] * 15 + [1]))  # fmt: skip


def qwen3_30b_capacity(*, cp: int = 1, ep: int = 8, zero: int = 0) -> Plan:
    """Qwen3-30B-A3B (head_dim 128) with a 1.25 capacity factor, on 8 GPUs."""
    from planner.catalog.models import PRESETS

    doc = PRESETS["qwen3-30b-a3b"].model_dump()
    arch = ModelArch.model_validate({**doc, "moe": {**doc["moe"], "capacity_factor": 1.25}})
    return make_plan(arch=arch, cp=cp, dp=8 // cp, ep=ep, zero=zero, gbs=64, seq=8192)
