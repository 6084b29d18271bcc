"""Megatron-LM flags for context parallelism, expert parallelism and the MoE / attention shapes.

Checked against Megatron-LM's own parser (megatron/training/arguments.py at core_v0.12.0,
0.13.0, 0.14.0, 0.15.0, 0.16.1, 0.17.0, 0.18.2 and main d98e8a64dd, every flag here defined by
each; `parse_args` + `validate_args` + `core_transformer_config_from_args` of 0.16.1 and main
accept the MoE / CP plans of tests/frameworks/test_megatron_moe.py) and megatron-core 0.16.1's
TransformerConfig / MLATransformerConfig (that test):
- `--context-parallel-size cp`; validate_args: seq_length % (2 cp) == 0, and
  CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment (as with tp > 1); data parallel =
  world / (tp pp cp), so the plan's dp is Megatron's; `--cp-comm-type` p2p (the ring) or
  all_gather (Transformer Engine's DotProductAttention names);
- `--expert-model-parallel-size ep` (num_experts % ep == 0), `--expert-tensor-parallel-size
  etp` (written always: Megatron defaults it to tp, the plan's default is 1);
- MoE shapes: `--num-experts`, `--moe-router-topk`, `--moe-ffn-hidden-size`,
  `--moe-shared-expert-intermediate-size` (n_s x f_e, DeepSeekMoE's shared experts as one MLP),
  `--moe-layer-freq` (an int k: layer i is MoE when i % k == 0; else a Python list expression,
  moe_freq_type), `--moe-router-score-function`, `--moe-router-enable-expert-bias` with
  `--moe-router-load-balancing-type none` (aux-loss-free) or `aux_loss`,
  `--moe-expert-capacity-factor` (None: dropless), `--moe-token-dispatcher-type alltoall` (the
  all-to-all the plan costs; Megatron's default is allgather) and `--moe-grouped-gemm`;
- `--kv-channels` for a head_dim other than hidden / heads; MLA: `--multi-latent-attention`,
  `--q-lora-rank`, `--kv-lora-rank`, `--qk-head-dim`, `--qk-pos-emb-head-dim`, `--v-head-dim`.
"""

from __future__ import annotations

from itertools import groupby

from planner.launch.layers import LaunchView
from planner.specs.model import ModelArch, MoeSpec


def unsupported(v: LaunchView) -> list[str]:
    reasons: list[str] = []
    if v.arch is not None and v.arch.sliding_window is not None:
        reasons.append(
            "sliding_window: meshplan does not write Megatron-LM's sliding-window attention "
            "settings (not checked against its parser)"
        )
    if v.ep > 1 and v.tp > 1 and not v.sequence_parallel:
        # megatron-core ModelParallelConfig.__post_init__: a ValueError at 0.12, a warning
        # ("... must be used") at 0.16
        reasons.append(
            f"ep={v.ep} with tp={v.tp} needs sequence_parallel (megatron-core: 'When using "
            f"expert parallelism and tensor parallelism, sequence parallelism must be used')"
        )
    return reasons


def parallel_args(v: LaunchView) -> list[str]:
    """The context and expert parallel degrees (expert ones only for an MoE model)."""
    argv: list[str] = []
    if v.cp > 1:
        argv += ["--context-parallel-size", str(v.cp), "--cp-comm-type", v.cp_comm]
    if v.arch is not None and v.arch.moe is not None:
        argv += ["--expert-model-parallel-size", str(v.ep)]
        argv += ["--expert-tensor-parallel-size", str(v.etp)]
    return argv


def shape_args(arch: ModelArch) -> list[str]:
    """Attention head sizes and the MoE layers' shapes and routing."""
    argv: list[str] = []
    if arch.head_dim is not None:
        argv += ["--kv-channels", str(arch.head_dim)]
    if arch.mla is not None:
        m = arch.mla
        argv += ["--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank)]
        if m.q_lora_rank is not None:
            argv += ["--q-lora-rank", str(m.q_lora_rank)]
        argv += ["--qk-head-dim", str(m.qk_nope_head_dim)]
        argv += ["--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)]
        argv += ["--v-head-dim", str(m.v_head_dim)]
    if arch.moe is not None:
        argv += moe_args(arch.moe, arch.num_layers)
    return argv


def moe_args(moe: MoeSpec, num_layers: int) -> list[str]:
    argv = [
        "--num-experts",
        str(moe.num_experts),
        "--moe-router-topk",
        str(moe.experts_per_token),
        "--moe-ffn-hidden-size",
        str(moe.moe_ffn_hidden_size),
    ]
    if moe.num_shared_experts:
        size = moe.num_shared_experts * moe.moe_ffn_hidden_size
        argv += ["--moe-shared-expert-intermediate-size", str(size)]
    if moe.first_dense_layers or moe.moe_layer_frequency > 1:
        argv += ["--moe-layer-freq", layer_pattern(moe, num_layers)]
    argv += ["--moe-router-score-function", moe.router]
    if moe.aux_loss_free:
        argv += ["--moe-router-enable-expert-bias", "--moe-router-load-balancing-type", "none"]
    else:
        argv += ["--moe-router-load-balancing-type", "aux_loss"]
    if moe.capacity_factor is not None:
        argv += ["--moe-expert-capacity-factor", repr(moe.capacity_factor)]
    return [*argv, "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm"]


def layer_pattern(moe: MoeSpec, num_layers: int) -> str:
    """`--moe-layer-freq`: the frequency when every k-th layer from 0 is MoE, else the
    per-layer 0/1 list as runs, e.g. "[0]*3+[1]*58" (Megatron's moe_freq_type evaluates it)."""
    flags = [int(moe.is_moe_layer(i)) for i in range(num_layers)]
    k = moe.moe_layer_frequency
    if flags == [int(i % k == 0) for i in range(num_layers)]:
        return str(k)
    return "+".join(f"[{bit}]*{len(list(run))}" for bit, run in groupby(flags))


def notes(v: LaunchView) -> list[str]:
    out: list[str] = []
    moe = v.arch.moe if v.arch is not None else None
    if moe is not None and not moe.aux_loss_free:
        out.append(
            "--moe-aux-loss-coeff is left at Megatron's default: the plan does not record the "
            "load-balancing loss weight"
        )
    if moe is not None:
        out.append("--moe-grouped-gemm needs compute capability >= 8.0 (validate_args)")
    return out
