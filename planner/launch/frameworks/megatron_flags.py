"""Every Megatron-LM flag the emitter can write, with the first release that defines it.

Checked once against Megatron-LM's own argument parser (`megatron/training/arguments.py`,
`add_megatron_arguments`, built at the tags core_v0.12.0, core_v0.13.0, core_v0.14.0,
core_v0.15.0, core_v0.16.1, core_v0.17.0, core_v0.18.2 and main at d98e8a64dd): each flag below
is defined by every one of those from the release named on. Megatron-LM's parser is not on PyPI,
so the suite checks only that the emitter writes no flag outside this table (docs/launch.md
shows the same table).
"""

from __future__ import annotations

FIRST_CHECKED = "core_v0.12.0"

FLAGS: dict[str, str] = {
    "--tensor-model-parallel-size": FIRST_CHECKED,
    "--pipeline-model-parallel-size": FIRST_CHECKED,
    "--num-layers-per-virtual-pipeline-stage": FIRST_CHECKED,
    "--num-virtual-stages-per-pipeline-rank": FIRST_CHECKED,
    "--account-for-embedding-in-pipeline-split": FIRST_CHECKED,
    "--account-for-loss-in-pipeline-split": FIRST_CHECKED,
    "--decoder-first-pipeline-num-layers": FIRST_CHECKED,
    "--decoder-last-pipeline-num-layers": FIRST_CHECKED,
    "--pipeline-model-parallel-layout": "core_v0.13.0",
    "--sequence-parallel": FIRST_CHECKED,
    "--num-layers": FIRST_CHECKED,
    "--hidden-size": FIRST_CHECKED,
    "--num-attention-heads": FIRST_CHECKED,
    "--ffn-hidden-size": FIRST_CHECKED,
    "--seq-length": FIRST_CHECKED,
    "--max-position-embeddings": FIRST_CHECKED,
    "--micro-batch-size": FIRST_CHECKED,
    "--global-batch-size": FIRST_CHECKED,
    "--recompute-granularity": FIRST_CHECKED,
    "--recompute-method": FIRST_CHECKED,
    "--recompute-num-layers": FIRST_CHECKED,
    "--use-distributed-optimizer": FIRST_CHECKED,
    "--bf16": FIRST_CHECKED,
    "--swiglu": FIRST_CHECKED,
    "--normalization": FIRST_CHECKED,
    "--position-embedding-type": FIRST_CHECKED,
    "--disable-bias-linear": FIRST_CHECKED,
    "--attention-dropout": FIRST_CHECKED,
    "--hidden-dropout": FIRST_CHECKED,
    "--group-query-attention": FIRST_CHECKED,
    "--num-query-groups": FIRST_CHECKED,
    "--untie-embeddings-and-output-weights": FIRST_CHECKED,
    "--mock-data": FIRST_CHECKED,
    "--tokenizer-type": FIRST_CHECKED,
    "--vocab-size": FIRST_CHECKED,
    "--train-iters": FIRST_CHECKED,
    "--lr": FIRST_CHECKED,
    "--log-interval": FIRST_CHECKED,
    # context and expert parallelism, MoE and attention shapes (planner/launch/frameworks/
    # megatron_moe.py), checked at core_v0.12.0, core_v0.16.1 and main d98e8a64dd
    "--context-parallel-size": FIRST_CHECKED,
    "--cp-comm-type": FIRST_CHECKED,
    "--expert-model-parallel-size": FIRST_CHECKED,
    "--expert-tensor-parallel-size": FIRST_CHECKED,
    "--num-experts": FIRST_CHECKED,
    "--moe-router-topk": FIRST_CHECKED,
    "--moe-ffn-hidden-size": FIRST_CHECKED,
    "--moe-shared-expert-intermediate-size": FIRST_CHECKED,
    "--moe-layer-freq": FIRST_CHECKED,
    "--moe-router-score-function": FIRST_CHECKED,
    "--moe-router-enable-expert-bias": FIRST_CHECKED,
    "--moe-router-load-balancing-type": FIRST_CHECKED,
    "--moe-expert-capacity-factor": FIRST_CHECKED,
    "--moe-token-dispatcher-type": FIRST_CHECKED,
    "--moe-grouped-gemm": FIRST_CHECKED,
    "--kv-channels": FIRST_CHECKED,
    "--multi-latent-attention": FIRST_CHECKED,
    "--q-lora-rank": FIRST_CHECKED,
    "--kv-lora-rank": FIRST_CHECKED,
    "--qk-head-dim": FIRST_CHECKED,
    "--qk-pos-emb-head-dim": FIRST_CHECKED,
    "--v-head-dim": FIRST_CHECKED,
}
