"""torchtitan 0.3.x: `--module llama3 --config <config function>` and `--section.key` overrides.

Rules applied (torchtitan 0.3.0: config/manager.py `ConfigManager`, trainer.py `Trainer.Config`,
distributed/pipeline_parallel.py `_get_pipeline_metadata`, `_build_pipeline_schedule`,
`_generate_llm_fqn_per_model_part`; models/llama3/config_registry.py, parallelize.py):
- the model is chosen by a config function (`--module llama3 --config llama3_8b`); model shapes
  are not command-line options;
- `--parallelism.pipeline-parallel-layers-per-stage k` gives ceil((N + 2) / k) stages (embedding
  and output weigh one layer each, the `*-stage-less-layers` defaults), a multiple of pp, split by
  `_generate_llm_fqn_per_model_part`; single-stage schedules need 1 stage per rank, multi-stage
  ones at least 2. Any other split is written out with `--parallelism.module-fqns-per-model-part`
  (one comma-joined word per stage; stage i on rank i % pp, a V for ZBVZeroBubble);
- local_batch_size % pipeline_parallel_microbatch_size == 0, and global_batch_size %
  (local_batch_size * dp) == 0 (the quotient is the gradient-accumulation steps);
- pp > 1 needs `--training.disable-cuda-graphs` ("CUDA graphs do not support pipeline
  parallelism yet"), and so does ep > 1 with the models' default AllToAllTokenDispatcher
  (it synchronizes with the CPU);
- llama3's parallelize always applies FSDP2 over (dp_replicate, dp_shard): ZeRO-0 is
  `data_parallel_replicate_degree = dp` with shard degree 1, ZeRO-3 the shard degree; ZeRO-1/2
  are not torchtitan settings;
- context parallel: `--parallelism.context-parallel-degree` (torch's context_parallel with the
  head-tail load balancer, 2 of 2 cp chunks per rank; K/V all-gathered, torch's default rotate
  method, which 0.3.0 does not expose); expert parallel: `--parallelism.expert-parallel-degree`,
  whose ranks come from dp_shard x cp x tp (efsdp = dp_shard cp tp / ep; dp_replicate is
  outside), so ZeRO-0 (dp_shard = 1) needs ep | cp tp; 0.3.0 has no expert tensor parallel
  degree (experts are whole on each ep rank: etp = 1). MoE models are its qwen3, deepseek_v3
  and gpt_oss modules, matched by shape;
- activation checkpointing is a subcommand, `activation-checkpoint:none|selective|full`, one
  policy for every block; sequence parallel is `--parallelism.[no-]enable-sequence-parallel`.
"""

from __future__ import annotations

import math

from planner.launch.capabilities import capabilities
from planner.launch.deployment import Deployment
from planner.launch.frameworks.folded import folded_reasons
from planner.launch.frameworks.patterns import mixed_modes_reason, uniform_mode
from planner.launch.layers import LaunchView, StageLayers, view
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan
from planner.specs.base import ScheduleName
from planner.specs.model import ModelArch

MODULE = "llama3"
OUTPUT = ("norm", "lm_head")  # llama3's modules after the last block (0.3.x names)

SCHEDULES: dict[ScheduleName, str] = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "zb-h1": "InterleavedZeroBubble",
    "zbv": "ZBVZeroBubble",
}
SINGLE_STAGE = frozenset({"gpipe", "1f1b"})  # torch's PipelineScheduleSingle subclasses

# torchtitan's llama3 config functions (models/llama3/config_registry.py), matched by shape
_LLAMA3_CONFIGS = {
    "llama3_debugmodel": (6, 256, 16, 16),
    "llama3_8b": (32, 4096, 32, 8),
    "llama3_70b": (80, 8192, 64, 8),
    "llama3_405b": (126, 16384, 128, 8),
}
# its MoE config functions (models/*/config_registry.py): (module, function) by
# (layers, hidden, heads, kv heads, experts, top-k)
_MOE_CONFIGS = {
    (48, 2048, 32, 4, 128, 8): ("qwen3", "qwen3_30b_a3b"),
    (61, 7168, 128, 128, 256, 8): ("deepseek_v3", "deepseek_v3_671b"),
    (36, 2880, 64, 8, 128, 4): ("gpt_oss", "gpt_oss_120b"),
}
MOE_MODULE = "qwen3"  # the module to add an unmatched MoE shape's config function to
_WHY = {
    "cp": "torchtitan 0.3.0 runs torch's context_parallel, whose rotate method (all-gather by "
    "default) it does not expose",
    "etp": "torchtitan 0.3.0 has no expert tensor parallel degree (ParallelismConfig has "
    "expert_parallel_degree only; experts are whole on each ep rank)",
}


def unsupported(v: LaunchView) -> list[str]:
    caps = capabilities("torchtitan")
    reasons: list[str] = []
    if v.dp > 1 and v.zero_stage not in caps.zero_stages:
        reasons.append(
            f"zero_stage={v.zero_stage}: ZeRO-1/2 is not a torchtitan concept; its data "
            f"parallel is FSDP2, sharded (data_parallel_shard_degree, = ZeRO-3) or replicated "
            f"(data_parallel_replicate_degree, = ZeRO-0)"
        )
    reasons += folded_reasons(v, caps, why=_WHY)
    if v.ep > 1:
        shard = v.dp if v.zero_stage == 3 else 1
        if (shard * v.cp * v.tp) % v.ep:
            reasons.append(
                f"ep={v.ep} must divide dp_shard*cp*tp = {shard}*{v.cp}*{v.tp} = "
                f"{shard * v.cp * v.tp}: torchtitan's expert ranks come from the FSDP, cp and tp "
                f"ranks (zero_stage={v.zero_stage} gives dp_shard={shard})"
            )
    stages = v.stage_layers()
    if stages is not None:
        mode = uniform_mode(stages)
        if mode is None:
            says = "torchtitan applies one activation-checkpoint policy to every block"
            reasons.append(mixed_modes_reason(stages, says))
        empty = [
            s.index for s in stages if not s.decoders and not s.has_embedding and not s.has_head
        ]
        if empty:
            reasons.append(f"stages {empty} hold no layer; torchtitan builds no empty stage")
    return reasons


def generate_llm_fqn_per_model_part(num_stages: int, num_layers: int) -> list[list[str]]:
    """torchtitan's default split (input and output weigh 1), re-derived to compare with."""
    blocks = [f"layers.{i}" for i in range(num_layers)]
    if num_stages == 1:
        return [["tok_embeddings", *blocks, *OUTPUT]]
    per, extra = divmod(num_layers + 2, num_stages)
    out: list[list[str]] = []
    cur = 0
    for i in range(num_stages):
        n = per + (1 if i < extra else 0)
        take = n - (1 if i in (0, num_stages - 1) else 0)
        chunk = blocks[cur : cur + max(0, take)]
        cur += len(chunk)
        names = (["tok_embeddings"] if i == 0 else []) + chunk
        if i == num_stages - 1:
            names += OUTPUT
        out.append(names)
    return out


def module_fqns(stages: tuple[StageLayers, ...]) -> list[list[str]]:
    """The plan's stages as llama3 module names (tok_embeddings, layers.i, norm, lm_head)."""
    out = []
    for s in stages:
        names = ["tok_embeddings"] if s.has_embedding else []
        names += [f"layers.{s.first_decoder + i}" for i in range(s.decoders)]
        names += list(OUTPUT) if s.has_head else []
        out.append(names)
    return out


def layers_per_stage(v: LaunchView, stages: tuple[StageLayers, ...]) -> int | None:
    """k with which torchtitan's own split equals the plan's, else None."""
    n, s_count = v.num_decoders, len(stages)
    if n is None or s_count == 1:
        return None
    if (v.vpp == 1) != (v.schedule in SINGLE_STAGE):
        return None  # e.g. InterleavedZeroBubble with one stage per rank: only fqns work
    if generate_llm_fqn_per_model_part(s_count, n) != module_fqns(stages):
        return None
    k = math.ceil((n + 2) / s_count)
    return k if math.ceil((n + 2) / k) == s_count else None


def module_config(arch: ModelArch | None, dep: Deployment) -> tuple[str, str | None]:
    """(module, config function) for the plan's shapes; the function None when none fits."""
    if arch is None or arch.moe is None:
        return MODULE, config_name(arch, dep)
    kv = arch.num_attention_heads if arch.mla is not None else arch.kv_heads
    key = (arch.num_layers, arch.hidden_size, arch.num_attention_heads, kv)
    found = _MOE_CONFIGS.get((*key, arch.moe.num_experts, arch.moe.experts_per_token))
    return found if found is not None else (MOE_MODULE, None)


def config_name(arch: ModelArch | None, dep: Deployment) -> str | None:
    """The llama3 config function for the plan's shapes (or the deployment's flavor)."""
    if dep.torchtitan_flavor:
        return f"llama3_{dep.torchtitan_flavor.lower()}"
    if arch is not None and arch.family == "llama":
        key = (arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.kv_heads)
        for name, shape in _LLAMA3_CONFIGS.items():
            if shape == key:
                return name
    return None


def overrides(plan: Plan, dep: Deployment) -> list[list[str]]:
    """The options after `--module/--config`, one option (with its values) per list."""
    v = view(plan)
    stages = v.stage_layers()
    assert stages is not None
    local = plan.micro_batch_size * plan.num_microbatches if plan.pp > 1 else plan.micro_batch_size
    replicate = plan.dp if plan.zero_stage != 3 else 1  # dp = 1: both degrees 1
    out = [
        ["--dump-folder", "./outputs"],
        ["--training.local-batch-size", str(local)],
        ["--training.global-batch-size", str(plan.global_batch_size)],
        ["--training.seq-len", str(plan.seq_length)],
        ["--training.steps", str(dep.steps or 100)],
        ["--training.mixed-precision-param", "bfloat16"],
        ["--dataloader.dataset", "c4_test"],
        ["--parallelism.data-parallel-replicate-degree", str(replicate)],
        ["--parallelism.data-parallel-shard-degree", str(plan.dp // replicate)],
        ["--parallelism.tensor-parallel-degree", str(plan.tp)],
        ["--parallelism.context-parallel-degree", str(plan.cp)],
        ["--parallelism.pipeline-parallel-degree", str(plan.pp)],
    ]
    if plan.arch is not None and plan.arch.moe is not None:
        out.append(["--parallelism.expert-parallel-degree", str(plan.ep)])
    if plan.ep > 1 and plan.pp == 1:
        # Trainer.Config: CUDA graphs need a dispatcher without CPU synchronization; the
        # models' default AllToAllTokenDispatcher synchronizes
        out.append(["--training.disable-cuda-graphs"])
    if plan.tp > 1:
        sp = "enable" if plan.sequence_parallel else "no-enable"
        out.append([f"--parallelism.{sp}-sequence-parallel"])
    if plan.pp > 1:
        out += [
            ["--training.disable-cuda-graphs"],
            ["--parallelism.pipeline-parallel-schedule", SCHEDULES[plan.schedule]],
            ["--parallelism.pipeline-parallel-microbatch-size", str(plan.micro_batch_size)],
        ]
        k = layers_per_stage(v, stages)
        if k is not None:
            out.append(["--parallelism.pipeline-parallel-layers-per-stage", str(k)])
        else:
            groups = [",".join(names) for names in module_fqns(stages)]
            out.append(["--parallelism.module-fqns-per-model-part", *groups])
    return out


def activation_checkpoint(plan: Plan) -> str:
    """The subcommand that selects the recompute policy (it comes after every option)."""
    stages = view(plan).stage_layers()
    assert stages is not None
    return f"activation-checkpoint:{uniform_mode(stages) or 'none'}"


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    module, name = module_config(plan.arch, dep)
    opts = overrides(plan, dep)
    ac = activation_checkpoint(plan)
    argv = [
        *entry(dep, module="torchtitan.train", script=None),
        "--module",
        module,
        "--config",
        name or f"{module}_meshplan",
        *(word for opt in opts for word in opt),
        *dep.entry_args,
        ac,
    ]
    notes = ["torchtitan 0.3.x (its ConfigManager reads --module, --config and the options)"]
    if name is None:
        flavor = " or set deployment.torchtitan_flavor" if module == MODULE else ""
        notes.append(
            f"no torchtitan {module} config function has these shapes: add one named "
            f"'{module}_meshplan' (in your own module, passed with --module){flavor}"
        )
    if ac == "activation-checkpoint:selective":
        notes.append(
            "torchtitan's selective checkpointing is op-level (SelectiveAC), not "
            "Korthikanti's attention-core recompute the plan assumes: memory and time differ"
        )
    if plan.zero_stage > 0 and plan.dp == 1:
        notes.append(f"zero_stage={plan.zero_stage} with dp=1 shards nothing; no FSDP sharding")
    return Trainer(argv=tuple(argv), notes=tuple(notes))
