"""torchtitan: the 0.2.x TOML job config, and the same settings as 0.3.x `--section.key` overrides.

Rules applied (torchtitan/distributed/pipeline_parallel.py `pipeline_llm`,
`build_pipeline_schedule`, `generate_llm_fqn_per_model_part`; train.py; models/*/parallelize.py):
- `pipeline_parallel_layers_per_stage = k` gives ceil((N + 2) / k) stages (embedding and output
  weigh one layer each), a multiple of pp, split by `generate_llm_fqn_per_model_part`; single-stage
  schedules need 1 stage per rank, multi-stage ones at least 2. Any other split is written out
  with `module_fqns_per_model_part` (stage i on rank i % pp; a V for ZBVZeroBubble);
- local_batch_size % pipeline_parallel_microbatch_size == 0, and global_batch_size %
  (local_batch_size * dp) == 0 (the quotient is the gradient-accumulation steps);
- data parallel is DDP (`data_parallel_replicate_degree`, ZeRO-0) or FSDP2
  (`data_parallel_shard_degree`, ZeRO-3); ZeRO-1/2 are not torchtitan settings, and 0.2.x applies
  DDP only when it is the sole parallelism ("DDP has not supported > 1D parallelism");
- `[activation_checkpoint] mode` is one of none | selective | full for every block.
"""

from __future__ import annotations

import json
import math

from planner.launch.common import shell_join
from planner.launch.deployment import Deployment, LaunchFile
from planner.launch.frameworks.patterns import mixed_modes_reason, uniform_mode
from planner.launch.layers import LaunchView, StageLayers, view
from planner.launch.trainer import Trainer, entry
from planner.plan import Plan
from planner.specs.base import ScheduleName
from planner.specs.model import ModelArch

CONFIG_FILE = "torchtitan.toml"
OVERRIDES_FILE = "torchtitan-0.3-overrides.txt"

SCHEDULES: dict[ScheduleName, str] = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "zb-h1": "InterleavedZeroBubble",
    "zbv": "ZBVZeroBubble",
}
SINGLE_STAGE = frozenset({"gpipe", "1f1b"})  # torch's PipelineScheduleSingle subclasses

# torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py), matched by shape
_LLAMA3_FLAVORS = {
    "8B": (32, 4096, 32, 8),
    "70B": (80, 8192, 64, 8),
    "405B": (126, 16384, 128, 8),
}


def unsupported(v: LaunchView) -> list[str]:
    reasons: list[str] = []
    if v.dp > 1 and v.zero_stage in (1, 2):
        reasons.append(
            f"zero_stage={v.zero_stage}: ZeRO-1/2 is not a torchtitan concept; its data "
            f"parallel is FSDP2 (data_parallel_shard_degree, = ZeRO-3) or DDP "
            f"(data_parallel_replicate_degree, = ZeRO-0)"
        )
    if v.dp > 1 and v.zero_stage == 0 and (v.tp > 1 or v.pp > 1):
        reasons.append(
            f"zero_stage=0 with dp={v.dp} and tp={v.tp}, pp={v.pp}: torchtitan 0.2.x applies "
            f"DDP only as the sole parallelism ('DDP has not supported > 1D parallelism'); "
            f"FSDP2 (zero_stage=3) would be needed"
        )
    stages = v.stage_layers()
    if stages is not None:
        mode = uniform_mode(stages)
        if mode is None:
            says = (
                "torchtitan's [activation_checkpoint] mode (none|selective|full) applies to "
                "every block"
            )
            reasons.append(mixed_modes_reason(stages, says))
        empty = [
            s.index for s in stages if not s.decoders and not s.has_embedding and not s.has_head
        ]
        if empty:
            reasons.append(f"stages {empty} hold no layer; torchtitan builds no empty stage")
    return reasons


def generate_llm_fqn_per_model_part(num_stages: int, num_layers: int) -> list[list[str]]:
    """torchtitan's default split (input and output weight 1), re-derived to compare with."""
    if num_stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(num_layers)), "norm", "output"]]
    per, extra = divmod(num_layers + 2, num_stages)
    out: list[list[str]] = []
    cur = 0
    for i in range(num_stages):
        n = per + (1 if i < extra else 0)
        names = ["tok_embeddings"] if i == 0 else []
        take = n - (1 if i in (0, num_stages - 1) else 0)
        for _ in range(take):
            if cur < num_layers:
                names.append(f"layers.{cur}")
                cur += 1
        if i == num_stages - 1:
            names += ["norm", "output"]
        out.append(names)
    return out


def module_fqns(stages: tuple[StageLayers, ...]) -> list[list[str]]:
    """The plan's stages as torchtitan module names (llama3's: tok_embeddings, layers.i, ...)."""
    out = []
    for s in stages:
        names = ["tok_embeddings"] if s.has_embedding else []
        names += [f"layers.{s.first_decoder + i}" for i in range(s.decoders)]
        names += ["norm", "output"] if s.has_head else []
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


def settings(plan: Plan, dep: Deployment) -> dict[str, dict[str, object]]:
    """The job config as {section: {key: value}} (0.2.x names)."""
    v = view(plan)
    stages = v.stage_layers()
    assert stages is not None
    arch = plan.arch
    local = plan.micro_batch_size * plan.num_microbatches if plan.pp > 1 else plan.micro_batch_size
    parallelism: dict[str, object] = {
        "data_parallel_replicate_degree": plan.dp if plan.zero_stage == 0 else 1,
        "data_parallel_shard_degree": plan.dp if plan.zero_stage == 3 else 1,
        "tensor_parallel_degree": plan.tp,
        "context_parallel_degree": 1,
        "pipeline_parallel_degree": plan.pp,
    }
    if plan.dp == 1:
        parallelism["data_parallel_replicate_degree"] = 1
        parallelism["data_parallel_shard_degree"] = 1
    if plan.pp > 1:
        parallelism["pipeline_parallel_schedule"] = SCHEDULES[plan.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
        k = layers_per_stage(v, stages)
        if k is not None:
            parallelism["pipeline_parallel_layers_per_stage"] = k
        else:
            parallelism["module_fqns_per_model_part"] = module_fqns(stages)
    mode = uniform_mode(stages) or "none"
    ac: dict[str, object] = {"mode": mode}
    if mode == "selective":
        ac["selective_ac_option"] = "op"
    return {
        "job": {"dump_folder": "./outputs", "description": f"meshplan plan for {plan.model_name}"},
        "model": {"name": "llama3", "flavor": dep.torchtitan_flavor or _flavor(arch)},
        "training": {
            "local_batch_size": local,
            "global_batch_size": plan.global_batch_size,
            "seq_len": plan.seq_length,
            "steps": dep.steps or 100,
            "mixed_precision_param": "bfloat16",
            "dataset": "c4_test",
        },
        "parallelism": parallelism,
        "activation_checkpoint": ac,
    }


def _flavor(arch: ModelArch | None) -> str:
    if arch is not None:
        key = (arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.kv_heads)
        for name, shape in _LLAMA3_FLAVORS.items():
            if shape == key and arch.family == "llama":
                return name
    return "meshplan"


def to_toml(doc: dict[str, dict[str, object]]) -> str:
    lines: list[str] = []
    for section, values in doc.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(x) for x in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def overrides(doc: dict[str, dict[str, object]]) -> list[str]:
    """`--section.key value` pairs for torchtitan 0.3.x (lists as JSON)."""
    out: list[str] = []
    for section, values in doc.items():
        for key, value in values.items():
            text = json.dumps(value) if isinstance(value, list) else _plain(value)
            out += [f"--{section}.{key}", text]
    return out


def _plain(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def trainer(plan: Plan, dep: Deployment, *, config_dir: str) -> Trainer:
    doc = settings(plan, dep)
    argv = [
        *entry(dep, module="torchtitan.train", script=None),
        "--job.config_file",
        config_dir + CONFIG_FILE,
        *dep.entry_args,
    ]
    ov = overrides(doc)
    pairs = "\n".join(shell_join(ov[i : i + 2]) for i in range(0, len(ov), 2))
    notes = [
        f"torchtitan 0.2.x reads {CONFIG_FILE}; for 0.3.x pass the --section.key overrides in "
        f"{OVERRIDES_FILE} to your config function",
    ]
    if doc["model"]["flavor"] == "meshplan":
        notes.append(
            "no torchtitan llama3 flavor has these shapes: register a flavor named 'meshplan' "
            "(or set deployment.torchtitan_flavor)"
        )
    if plan.tp > 1 and not plan.sequence_parallel:
        notes.append(
            "torchtitan's tensor parallel always shards norms along the sequence (sequence "
            "parallel); the plan has it off, so activation memory will be below the prediction"
        )
    if doc["activation_checkpoint"]["mode"] == "selective":
        notes.append(
            "torchtitan's selective checkpointing is op-level (selective_ac_option='op'), not "
            "Korthikanti's attention-core recompute the plan assumes: memory and time differ"
        )
    if plan.zero_stage > 0 and plan.dp == 1:
        notes.append(f"zero_stage={plan.zero_stage} with dp=1 shards nothing; no FSDP applied")
    files = (
        LaunchFile(name=CONFIG_FILE, content=to_toml(doc)),
        LaunchFile(name=OVERRIDES_FILE, content=pairs + "\n"),
    )
    return Trainer(argv=tuple(argv), files=files, notes=tuple(notes))
