"""The cost model orders configurations of one model the way published measurements do.

Sources:
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (arXiv 2104.04473), §5.4.1 / Figure 13: a GPT of 162.2B parameters (32 layers,
  128 heads, hidden 20480), 64 A100 GPUs, micro-batch 1, (t, p) in {(2,32), (4,16), (8,8),
  (16,4), (32,2)}; "we see peak performance when the tensor-parallel size is equal to the
  number of GPUs in a single node (8 with DGX A100 nodes)". The figure's legend gives batch
  sizes 32, 128 and 512.
- Same paper, §5.5 / Figure 16: (t, p) = (8, 8), 64 A100 GPUs, a 91B GPT, batch sizes 128 and
  512, micro-batch 1, 2, 4, 8: "the best microbatch size is 2 for this model". The paper does
  not print the 91B shape; we take h = 10240, 80 heads, 72 layers (9 per stage), which is
  91.1B by its Eq. 2 with V = 51200, s = 2048.
- Megatron-LM README (H100 results): vocabulary 131072, sequence length 4096; "MFU increases
  from 41% for the smallest model considered to 47-48% for the largest" (weak scaling, 2B to
  462B) and the GPT-3 175B strong-scaling run, batch 1152 from 96 to 4608 H100s, falls "from
  47% to 42%" MFU. The README's table of shapes is an image; we take GPT-3's own shapes
  (Brown et al. 2020, Table 2.1): 2.7B (32 layers, h 2560, 32 heads) and 175B (96 layers,
  h 12288, 96 heads), tp = 4, pp = 8 for 175B (Megatron-Core's GPT-3 175B recipe).
Every row uses the one rule of bench/megatron_table1.py for what the papers leave out (full
recompute, interleaved-1f1b with the least vpp >= 2 dividing the layers per rank), except
Figure 13: its (2, 32) split has one layer per stage and cannot interleave, so all five splits
run plain 1f1b there.
"""

from __future__ import annotations

import itertools

import pytest

from planner.cost import evaluate
from planner.plan import Prediction
from planner.specs import Candidate, ClusterSpec, Constraints, ModelArch, PlanRequest, TrainingSpec

GPT_91B = ModelArch(
    family="gpt",
    name="gpt-91b",
    num_layers=72,
    hidden_size=10240,
    num_attention_heads=80,
    vocab_size=51200,
)
GPT_162B = ModelArch(
    family="gpt",
    name="gpt-162b",
    num_layers=32,
    hidden_size=20480,
    num_attention_heads=128,
    vocab_size=51200,
)
GPT3_2_7B = ModelArch(
    family="gpt",
    name="gpt3-2.7b",
    num_layers=32,
    hidden_size=2560,
    num_attention_heads=32,
    vocab_size=131072,
)
GPT3_175B = ModelArch(
    family="gpt",
    name="gpt3-175b",
    num_layers=96,
    hidden_size=12288,
    num_attention_heads=96,
    vocab_size=131072,
)


def _predict(
    arch: ModelArch,
    *,
    gpu: str,
    num_gpus: int,
    batch: int,
    seq: int,
    tp: int,
    pp: int,
    mbs: int = 1,
    zero_stage: int = 0,
    interleave: bool = True,
) -> Prediction:
    request = PlanRequest(
        model=arch,
        cluster=ClusterSpec(gpu=gpu, num_gpus=num_gpus, gpus_per_node=8),
        training=TrainingSpec(global_batch_size=batch, seq_length=seq, dtype="bf16"),
        constraints=Constraints(tp_across_nodes=True),
    )
    per_rank = arch.num_layers // pp
    vpp = next((v for v in range(2, per_rank + 1) if per_rank % v == 0), 1) if pp > 1 else 1
    vpp = vpp if interleave else 1
    candidate = Candidate(
        tp=tp,
        pp=pp,
        dp=num_gpus // (tp * pp),
        vpp=vpp,
        schedule="interleaved-1f1b" if vpp > 1 else "1f1b",
        micro_batch_size=mbs,
        zero_stage=zero_stage,
        recompute="full",
    )
    return evaluate(request, candidate)


def test_the_91b_shape_is_91b_parameters() -> None:
    # Narayanan 2021, Eq. 2: P = 12 L h^2 (1 + 13/(12h) + (V + s)/(12 L h))
    a, h = GPT_91B.num_layers, GPT_91B.hidden_size
    params = 12 * a * h * h * (1 + 13 / (12 * h) + (51200 + 2048) / (12 * a * h))
    assert params == pytest.approx(91.1e9, rel=0.005)


@pytest.mark.parametrize("batch", [128, 512])
def test_fig16_micro_batch_2_is_fastest_for_91b_at_8_8(batch: int) -> None:
    tflops = {
        mbs: _predict(
            GPT_91B, gpu="A100", num_gpus=64, batch=batch, seq=2048, tp=8, pp=8, mbs=mbs
        ).hardware_tflops_per_gpu
        for mbs in (1, 2, 4, 8)
    }
    assert max(tflops, key=tflops.__getitem__) == 2, tflops
    # the bubble grows with the micro-batch: 8 is clearly worse at the small batch (the figure:
    # about 120 against 158 TFLOP/s at batch 128)
    if batch == 128:
        assert tflops[8] < 0.95 * tflops[2], tflops


@pytest.mark.parametrize("batch", [32, 128, 512])
def test_fig13_tp8_pp8_is_fastest_for_162b_on_64_gpus(batch: int) -> None:
    splits = ((2, 32), (4, 16), (8, 8), (16, 4), (32, 2))
    tflops = {
        (t, p): _predict(
            GPT_162B, gpu="A100", num_gpus=64, batch=batch, seq=2048, tp=t, pp=p, interleave=False
        ).hardware_tflops_per_gpu
        for t, p in splits
    }
    assert max(tflops, key=tflops.__getitem__) == (8, 8), tflops
    # tensor parallelism across nodes (t = 16, 32) costs more than a deeper pipeline saves
    assert tflops[(32, 2)] < tflops[(16, 4)] < tflops[(8, 8)], tflops


def test_h100_mfu_rises_with_model_size() -> None:
    small = _predict(GPT3_2_7B, gpu="H100", num_gpus=64, batch=256, seq=4096, tp=1, pp=1)
    large = _predict(
        GPT3_175B, gpu="H100", num_gpus=96, batch=1152, seq=4096, tp=4, pp=8, zero_stage=1
    )
    assert small.mfu < large.mfu, (small.mfu, large.mfu)


def test_h100_strong_scaling_175b_mfu_falls_from_96_to_4608_gpus() -> None:
    mfu = [
        _predict(
            GPT3_175B, gpu="H100", num_gpus=n, batch=1152, seq=4096, tp=4, pp=8, zero_stage=1
        ).mfu
        for n in (96, 384, 1536, 4608)
    ]
    assert all(a > b for a, b in itertools.pairwise(mfu)), mfu
    # the README: 47 % -> 42 %, an 11 % relative fall; ours falls by at least that much
    assert mfu[-1] < 0.89 * mfu[0], mfu
