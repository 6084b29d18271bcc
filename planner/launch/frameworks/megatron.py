"""Megatron-LM (`pretrain_gpt.py`, megatron-core >= 0.12): arguments that reproduce a plan.

Rules applied (megatron/training/arguments.py `validate_args`, megatron/core/transformer/
transformer_config.py, transformer_block.py `get_num_layers_to_build`, pipeline_parallel/
schedules.py):
- even split: num_layers % pp == 0; with virtual stages, the layers per rank divisible by vpp;
- `--account-for-embedding/loss-in-pipeline-split`: the embedding / loss count as one layer;
- uneven: `--decoder-first/last-pipeline-num-layers` (> 0, divisible by vpp), the remaining
  layers divisible by the middle stages (pp - 2, or pp - 1 with only one of them), and not
  together with the account-for flags; with virtual stages only
  `--num-virtual-stages-per-pipeline-rank` (not `--num-layers-per-virtual-pipeline-stage`);
- any other split: `--pipeline-model-parallel-layout` ("Et*3|t*4|...|t*2L", megatron-core >= 0.13);
- interleaving needs num_microbatches % pp == 0 (pp == 2 included: P2P overlap is on by default,
  `--no-overlap-p2p-communication` turns it off);
- global_batch % (micro_batch * dp) == 0; sequence parallel needs tp > 1; tp divides the
  attention heads and the query groups;
- recompute: `--recompute-granularity selective` (core attention), or `full` with
  `--recompute-method uniform` (every block, `--recompute-num-layers 1`) or `block` (the first
  k blocks of every stage, `--recompute-num-layers k`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.launch.capabilities import capabilities
from planner.launch.deployment import Deployment
from planner.launch.frameworks import megatron_moe
from planner.launch.frameworks.folded import folded_reasons
from planner.launch.frameworks.patterns import (
    block_pattern,
    mixed_modes_reason,
    per_rank_counts,
    uniform_mode,
)
from planner.launch.layers import LaunchView, StageLayers, view
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan

NAME = "megatron"


@dataclass(frozen=True)
class Args:
    """Flags found for one aspect of the plan, or the reasons none exist."""

    argv: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def unsupported(v: LaunchView) -> list[str]:
    caps = capabilities("megatron")
    reasons: list[str] = []
    if v.pp > 1:
        if v.schedule not in caps.schedules:
            reasons.append(
                f"schedule {v.schedule!r}: Megatron-LM runs 1F1B (vpp=1) or interleaved 1F1B "
                f"(vpp>1) pipelines only"
            )
        m = v.num_microbatches
        if caps.interleaved_m_multiple_of_pp and v.vpp > 1 and m is not None and m % v.pp:
            reasons.append(
                f"num_microbatches={m} is not divisible by pp={v.pp}, which "
                f"Megatron's interleaved schedule requires"
            )
    if v.zero_stage not in (caps.zero_stages if v.pp == 1 else caps.zero_stages_with_pp):
        reasons.append(
            f"zero_stage={v.zero_stage}: Megatron-LM shards optimizer state (ZeRO-1, "
            f"--use-distributed-optimizer); ZeRO-2/3 are not Megatron flags"
        )
    if v.sequence_parallel and v.tp == 1:
        reasons.append("sequence_parallel with tp=1: Megatron disables it (it needs tp > 1)")
    if v.global_batch_size is not None and v.global_batch_size % (v.micro_batch_size * v.dp):
        reasons.append(
            f"global_batch_size={v.global_batch_size} is not divisible by micro_batch_size*dp "
            f"= {v.micro_batch_size}*{v.dp}"
        )
    if v.arch is not None:
        a, kv = v.arch.num_attention_heads, v.arch.kv_heads
        if a % v.tp or kv % v.tp:
            reasons.append(
                f"tp={v.tp} must divide num_attention_heads={a} and num_query_groups={kv}"
            )
    reasons += folded_reasons(v, caps, why={}) + megatron_moe.unsupported(v)
    stages = v.stage_layers()
    if stages is not None:
        reasons += split_args(v, stages).reasons
        reasons += recompute_args(stages).reasons
    return reasons


def split_args(v: LaunchView, stages: tuple[StageLayers, ...]) -> Args:
    """The pipeline flags that reproduce the plan's stage boundaries exactly."""
    pp, vpp = v.pp, v.vpp
    if pp == 1:
        return Args()
    counts = [s.decoders for s in stages]
    vflag = ["--num-virtual-stages-per-pipeline-rank", str(vpp)] if vpp > 1 else []
    if len(set(counts)) == 1 and counts[0] > 0:
        if vpp > 1:
            return Args(["--num-layers-per-virtual-pipeline-stage", str(counts[0])])
        return Args()
    for emb, loss in ((1, 1), (1, 0), (0, 1)):
        with_edges = list(counts)
        with_edges[0] += emb
        with_edges[-1] += loss
        if len(set(with_edges)) == 1:
            argv = ["--account-for-embedding-in-pipeline-split"] if emb else []
            argv += ["--account-for-loss-in-pipeline-split"] if loss else []
            return Args(argv + vflag)
    per_rank, _ = per_rank_counts(counts, pp)
    if per_rank is not None:
        ranks = [c * vpp for c in per_rank]
        middle = set(ranks[1:-1])
        first, last = ranks[0], ranks[-1]
        if len(middle) <= 1 and 0 not in middle:
            m = next(iter(middle)) if middle else None
            argv = []
            if pp == 2 or first != m:
                argv += ["--decoder-first-pipeline-num-layers", str(first)]
            if pp > 2 and last != m:
                argv += ["--decoder-last-pipeline-num-layers", str(last)]
            ok = first > 0 and last > 0  # Megatron: both > 0, and middle stages hold some
            if ok:
                return Args(argv + vflag)
    layout = "|".join(
        ("E" if s.has_embedding else "")
        + ("t" if s.decoders == 1 else f"t*{s.decoders}" if s.decoders else "")
        + ("L" if s.has_head else "")
        for s in stages
    )
    if not stages[0].has_embedding or not stages[-1].has_head:
        return Args(
            reasons=[
                "the embedding must be on stage 0 and the head on the last stage for "
                "Megatron's pipeline layout"
            ]
        )
    return Args(
        ["--pipeline-model-parallel-layout", layout],
        notes=[
            f"the stage split {counts} (decoder blocks per stage) needs "
            f"--pipeline-model-parallel-layout (megatron-core >= 0.13)"
        ],
    )


def recompute_args(stages: tuple[StageLayers, ...]) -> Args:
    mode = uniform_mode(stages)
    notes = [
        f"the plan recomputes the {name} ({m}); Megatron does not checkpoint it"
        for s in stages
        for name, m in s.edge_recompute
        if m != "none"
    ]
    if mode == "none":
        return Args(notes=notes)
    if mode == "selective":
        return Args(["--recompute-granularity", "selective"], notes=notes)
    if mode == "full":
        argv = ["--recompute-granularity", "full", "--recompute-method", "uniform"]
        return Args([*argv, "--recompute-num-layers", "1"], notes=notes)
    k, reasons = block_pattern(stages)
    if k is None:
        says = (
            "Megatron recomputes one mode for every block (--recompute-granularity "
            "full|selective) or fully recomputes the first k blocks of every stage "
            "(--recompute-method block --recompute-num-layers k)"
        )
        return Args(reasons=[mixed_modes_reason(stages, says), *reasons])
    argv = ["--recompute-granularity", "full", "--recompute-method", "block"]
    return Args([*argv, "--recompute-num-layers", str(k)], notes=notes)


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    v = view(plan)
    arch = plan.arch
    assert arch is not None  # unsupported() refuses a plan without shapes
    stages = v.stage_layers()
    assert stages is not None
    split, rec = split_args(v, stages), recompute_args(stages)
    argv = [
        *entry(dep, module=None, script="pretrain_gpt.py"),
        "--tensor-model-parallel-size",
        str(plan.tp),
        "--pipeline-model-parallel-size",
        str(plan.pp),
        *split.argv,
        *megatron_moe.parallel_args(v),
    ]
    if plan.sequence_parallel:
        argv.append("--sequence-parallel")
    argv += [
        "--num-layers",
        str(arch.num_layers),
        "--hidden-size",
        str(arch.hidden_size),
        "--num-attention-heads",
        str(arch.num_attention_heads),
        "--ffn-hidden-size",
        str(arch.ffn),
        *megatron_moe.shape_args(arch),
        "--seq-length",
        str(plan.seq_length),
        "--max-position-embeddings",
        str(plan.seq_length),
        "--micro-batch-size",
        str(plan.micro_batch_size),
        "--global-batch-size",
        str(plan.global_batch_size),
        *rec.argv,
    ]
    if plan.zero_stage == 1:
        argv.append("--use-distributed-optimizer")
    argv.append("--bf16")
    if arch.family == "llama":
        argv += [
            "--swiglu",
            "--normalization",
            "RMSNorm",
            "--position-embedding-type",
            "rope",
            "--disable-bias-linear",
            "--attention-dropout",
            "0.0",
            "--hidden-dropout",
            "0.0",
        ]
        if arch.kv_heads != arch.num_attention_heads:
            argv += ["--group-query-attention", "--num-query-groups", str(arch.kv_heads)]
    else:
        argv += ["--position-embedding-type", "learned_absolute"]
    if not arch.tied:
        argv.append("--untie-embeddings-and-output-weights")
    notes = [*split.notes, *rec.notes, *megatron_moe.notes(v)]
    if "--data-path" not in dep.entry_args:
        argv += [
            "--mock-data",
            "--tokenizer-type",
            "NullTokenizer",
            "--vocab-size",
            str(arch.vocab_size),
        ]
        notes.append("synthetic data (--mock-data); pass --data-path and a tokenizer in entry_args")
    argv += ["--train-iters", str(dep.steps or 100), "--lr", "3e-4", "--log-interval", "1"]
    argv += dep.entry_args
    # validate_args (before Blackwell): tp > 1 or cp > 1 needs one CUDA connection
    env = (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),) if plan.tp > 1 or plan.cp > 1 else ()
    notes.append("bf16 (the plan does not record a dtype; meshplan plans default to bf16)")
    return Trainer(argv=tuple(argv), env=env, notes=tuple(notes))
