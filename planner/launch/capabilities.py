"""What each training framework can express (used by the emitters and to narrow the search).

`stage_split`: "any" (explicit boundaries), "first_last" (the first and last stage may differ,
the middle stages hold equal numbers of decoder layers), "uniform" (equal decoder layers per
stage). Megatron-LM is "any": --decoder-first/last-pipeline-num-layers and the account-for-
embedding/loss flags where they fit, else --pipeline-model-parallel-layout (megatron-core >= 0.13).

This table is the one source of the rules a search can apply before it has a stage split: each
framework's `unsupported()` reads its row, and the search (planner.search.space) enumerates only
what the row allows, then keeps a configuration only if `planner.launch.unsupported` finds
nothing against it. Rules on the stage split itself are the `stage_split` kind and, for a
finished plan, the framework's `unsupported()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.specs.base import Framework, RecomputeMode, ScheduleName


@dataclass(frozen=True)
class FrameworkCaps:
    name: Framework
    schedules: frozenset[ScheduleName]
    zero_stages: frozenset[int]  # allowed when pp == 1
    zero_stages_with_pp: frozenset[int]  # allowed when pp > 1
    recompute_modes: frozenset[RecomputeMode]
    per_layer_recompute: bool  # False: one mode for every decoder layer
    stage_split: Literal["any", "first_last", "uniform"]
    max_vpp: int
    sequence_parallel: bool = True  # Megatron-style sequence parallel (tp > 1) can be expressed
    interleaved_m_multiple_of_pp: bool = False  # vpp > 1 needs num_microbatches % pp == 0
    # Context and expert parallelism (docs/moe.md): the K/V exchanges cp can use, whether
    # ep > 1 and etp > 1 can be expressed. Empty / False: only 1.
    cp_comm: frozenset[str] = frozenset()
    expert_parallel: bool = False
    expert_tensor_parallel: bool = False


CAPABILITIES: dict[str, FrameworkCaps] = {
    "meshplan": FrameworkCaps(
        name="meshplan",
        schedules=frozenset({"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"}),
        zero_stages=frozenset({0, 1, 2, 3}),
        zero_stages_with_pp=frozenset({0, 1}),
        recompute_modes=frozenset({"none", "selective", "full"}),
        per_layer_recompute=True,
        stage_split="any",
        max_vpp=64,
        # profiler/runner/context.py: a ring of batch_isend_irecv; profiler/runner/expert.py:
        # whole experts per rank (no tensor parallel inside an expert)
        cp_comm=frozenset({"p2p"}),
        expert_parallel=True,
    ),
    "megatron": FrameworkCaps(
        name="megatron",
        schedules=frozenset({"1f1b", "interleaved-1f1b"}),
        zero_stages=frozenset({0, 1}),
        zero_stages_with_pp=frozenset({0, 1}),
        recompute_modes=frozenset({"none", "selective", "full"}),
        per_layer_recompute=False,
        stage_split="any",
        max_vpp=64,
        # forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/
        # schedules.py): micro-batch groups of pp, a remainder below pp is refused
        interleaved_m_multiple_of_pp=True,
        # --cp-comm-type (Transformer Engine's p2p ring or all_gather), --expert-model-parallel-
        # size, --expert-tensor-parallel-size (megatron/training/arguments.py)
        cp_comm=frozenset({"p2p", "all_gather"}),
        expert_parallel=True,
        expert_tensor_parallel=True,
    ),
    "torchtitan": FrameworkCaps(
        name="torchtitan",
        schedules=frozenset({"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"}),
        zero_stages=frozenset({0, 3}),
        zero_stages_with_pp=frozenset({0}),
        recompute_modes=frozenset({"none", "selective", "full"}),
        per_layer_recompute=False,
        stage_split="any",
        max_vpp=64,
        # 0.3.0 ParallelismConfig: context_parallel_degree (torch's context_parallel, K/V
        # all-gathered by its default rotate method) and expert_parallel_degree; no expert
        # tensor parallel setting (its sparse mesh is pp x dp_replicate x efsdp x ep)
        cp_comm=frozenset({"all_gather"}),
        expert_parallel=True,
    ),
    "deepspeed": FrameworkCaps(
        name="deepspeed",
        schedules=frozenset({"1f1b"}),
        zero_stages=frozenset({0, 1, 2, 3}),
        zero_stages_with_pp=frozenset({0, 1}),
        recompute_modes=frozenset({"none", "full"}),
        per_layer_recompute=False,
        stage_split="uniform",
        max_vpp=1,
        sequence_parallel=False,  # its Ulysses sequence parallel splits heads, another scheme
    ),
}


def capabilities(framework: Framework) -> FrameworkCaps:
    return CAPABILITIES[framework]
