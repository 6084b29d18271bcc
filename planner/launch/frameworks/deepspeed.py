"""DeepSpeed: the JSON config and the `PipelineModule` partition that reproduce a plan.

Rules applied (deepspeed/runtime/config.py, runtime/pipe/engine.py and module.py):
- train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp;
- the pipeline engine runs one 1F1B schedule (TrainSchedule), one stage per rank, and refuses
  ZeRO-2/3 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism");
- `PipelineModule(partition_method=...)` takes no explicit boundaries: "uniform" balances the
  number of layers, "type:<regex>" the number of matching layers, "parameters" the parameters;
- context parallelism: none in the config. DeepSpeed-Ulysses (`sequence_parallel_size`) splits
  attention heads by all-to-all, not the sequence into 2 cp causal chunks with a K/V ring;
- expert parallelism is set in the model code (`deepspeed.moe.layer.MoE(ep_size=...)`), not
  in the JSON config or the PipelineModule partition meshplan writes; its experts have no
  tensor parallel inside the expert group;
- activation checkpointing recomputes whole layers (`activation_checkpoint_interval`): there is
  no selective (attention-core) recompute and no per-layer choice.
"""

from __future__ import annotations

import json
from typing import Any

from planner.launch.capabilities import capabilities
from planner.launch.deployment import Deployment, LaunchFile
from planner.launch.frameworks.folded import folded_reasons
from planner.launch.frameworks.patterns import mixed_modes_reason, uniform_mode
from planner.launch.layers import LaunchView, StageLayers, view
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan

CONFIG_FILE = "ds_config.json"
PIPELINE_FILE = "ds_pipeline.json"


_WHY = {
    "cp": "DeepSpeed has no context parallelism of the plan's kind (DeepSpeed-Ulysses splits "
    "attention heads by all-to-all, not the sequence into 2*cp causal chunks)",
    "ep": "DeepSpeed's expert parallelism is set in the model code "
    "(deepspeed.moe.layer.MoE(ep_size=...)), not in the config meshplan writes",
    "etp": "DeepSpeed-MoE has no tensor parallel inside an expert in the config meshplan writes",
}


def unsupported(v: LaunchView) -> list[str]:
    caps = capabilities("deepspeed")
    reasons: list[str] = []
    if v.pp > 1:
        if v.schedule not in caps.schedules or v.vpp > caps.max_vpp:
            reasons.append(
                f"schedule {v.schedule!r} with vpp={v.vpp}: DeepSpeed's pipeline engine runs "
                f"1F1B with one stage per rank only"
            )
        if v.zero_stage not in caps.zero_stages_with_pp:
            reasons.append(
                f"zero_stage={v.zero_stage} with pp={v.pp}: DeepSpeed refuses ZeRO-2/3 with "
                f"pipeline parallelism"
            )
    if v.sequence_parallel and not caps.sequence_parallel:
        reasons.append(
            "sequence_parallel: DeepSpeed has no Megatron-style sequence parallel (its Ulysses "
            "sequence parallelism splits attention heads, a different scheme)"
        )
    reasons += folded_reasons(v, caps, why=_WHY)
    if v.global_batch_size is not None and v.global_batch_size % (v.micro_batch_size * v.dp):
        reasons.append(
            f"train_batch_size={v.global_batch_size} is not divisible by "
            f"train_micro_batch_size_per_gpu*dp = {v.micro_batch_size}*{v.dp}"
        )
    stages = v.stage_layers()
    if stages is not None:
        mode = uniform_mode(stages)
        if mode is None:
            reasons.append(
                mixed_modes_reason(
                    stages, "DeepSpeed checkpoints every layer or none (no per-layer choice)"
                )
            )
        elif mode not in caps.recompute_modes:
            reasons.append(
                f"recompute {mode!r}: DeepSpeed checkpoints whole layers; it has no "
                f"selective (attention-core) recompute"
            )
        if v.pp > 1 and partition_method(stages, "DecoderLayer") is None:
            counts = [s.decoders for s in stages]
            totals = [s.layers[1] - s.layers[0] for s in stages]
            reasons.append(
                f"stage split {counts} decoder blocks ({totals} layers incl. embedding/head): "
                f"DeepSpeed's PipelineModule takes no explicit boundaries; partition_method "
                f"'uniform' gives equal layer counts and 'type:<block class>' equal block counts"
            )
    return reasons


def partition_method(stages: tuple[StageLayers, ...], layer_class: str) -> str | None:
    """The partition_method that reproduces the plan's stages, or None."""
    counts = {s.decoders for s in stages}
    if len(counts) == 1 and 0 not in counts:
        return f"type:{layer_class}"
    totals = {s.layers[1] - s.layers[0] for s in stages}
    if len(totals) == 1:
        return "uniform"
    return None


def config(plan: Plan) -> dict[str, Any]:
    v = view(plan)
    stages = v.stage_layers()
    assert stages is not None
    doc: dict[str, Any] = {
        "train_batch_size": plan.global_batch_size,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": plan.zero_stage},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
    }
    if uniform_mode(stages) == "full":
        doc["activation_checkpointing"] = {
            "partition_activations": False,  # the plan keeps each layer input whole
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
            "number_checkpoints": None,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    if plan.pp > 1:
        doc["pipeline"] = {"pipe_partitioned": plan.tp > 1, "grad_partitioned": plan.tp > 1}
    return doc


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    v = view(plan)
    stages = v.stage_layers()
    assert stages is not None
    argv = [
        *entry(dep, module=None, script="train.py"),
        "--deepspeed",
        "--deepspeed_config",
        config_dir + CONFIG_FILE,
        *dep.entry_args,
    ]
    files = [LaunchFile(name=CONFIG_FILE, content=json.dumps(config(plan), indent=2) + "\n")]
    notes = [
        f"your script calls deepspeed.initialize(args=..., model=...) with {CONFIG_FILE} "
        f"(deepspeed.add_config_arguments adds --deepspeed/--deepspeed_config)",
    ]
    full = uniform_mode(stages) == "full"
    if plan.pp > 1:
        method = partition_method(stages, dep.deepspeed_layer_class)
        pipe = {
            "num_stages": plan.pp,
            "topology": {"num_pp": plan.pp, "num_mp": plan.tp, "num_dp": plan.dp},
            "partition_method": method,
            "activation_checkpoint_interval": 1 if full else 0,
            "layer_counts": {"embedding": 1, dep.deepspeed_layer_class: v.num_decoders, "head": 1},
        }
        files.append(LaunchFile(name=PIPELINE_FILE, content=json.dumps(pipe, indent=2) + "\n"))
        notes.append(
            f"build PipelineModule(layers=[embedding, {v.num_decoders} x "
            f"{dep.deepspeed_layer_class}, head], num_stages={plan.pp}, topology="
            f"PipeModelDataParallelTopology(num_pp={plan.pp}, num_mp={plan.tp}, "
            f"num_dp={plan.dp}), partition_method={method!r}, activation_checkpoint_interval="
            f"{pipe['activation_checkpoint_interval']}) as in {PIPELINE_FILE}"
        )
    elif full:
        notes.append(
            "pp=1: DeepSpeed does not checkpoint by itself; wrap each block in "
            "deepspeed.checkpointing.checkpoint (configured by activation_checkpointing)"
        )
    if plan.tp > 1:
        notes.append(
            f"tp={plan.tp}: the model implements tensor parallel itself (e.g. Megatron-DeepSpeed) "
            f"and passes its mpu to deepspeed.initialize, so that DeepSpeed's data-parallel size "
            f"is {plan.dp} (train_batch_size is checked against it)"
        )
    return Trainer(argv=tuple(argv), files=tuple(files), notes=tuple(notes))
