"""The plan request (one JSON document for the CLI and the REST API) and fixed candidates.

A *candidate* is a fully fixed configuration. Its stage indices run over the `pp * vpp` model
chunks in model order; stage `i` lives on a pipeline rank given by the schedule
(`planner.schedules.stage_to_rank`): looped (`i % pp`) for every schedule except `zbv`, whose
two chunks per rank form a V (`i` for `i < pp`, else `2*pp - 1 - i`). Layer indices run over the
profile's layers (embedding, decoder blocks, LM head), half-open `[first, end)`.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from planner.catalog.efficiency import Efficiency
from planner.specs.base import (
    SCHEDULES,
    CpComm,
    Framework,
    Frozen,
    RecomputeMode,
    ScheduleName,
    check_expert_grid,
)
from planner.specs.cluster import ClusterSpec
from planner.specs.limits import BOUNDS as B
from planner.specs.limits import TEXT
from planner.specs.model import ModelArch, ModelProfile
from planner.specs.training import TrainingSpec

GIB = 1024**3


class ProfileRef(Frozen):
    """A model given by a profile, inline or by the id of one stored in the service."""

    profile: ModelProfile | None = None
    profile_id: str | None = Field(default=None, min_length=1, max_length=TEXT.name_chars)

    @model_validator(mode="after")
    def _one(self) -> ProfileRef:
        if (self.profile is None) == (self.profile_id is None):
            given = "<ModelProfile>" if self.profile is not None else None
            raise ValueError(
                f"give exactly one of 'profile' or 'profile_id'; got profile={given}, "
                f"profile_id={self.profile_id!r}"
            )
        return self


def _model_kind(value: Any) -> str:
    """A model given with a `family` is a built-in architecture; otherwise a profile."""
    if isinstance(value, dict):
        return "arch" if "family" in value else "profile"
    return "arch" if isinstance(value, ModelArch) else "profile"


ModelSpec = Annotated[
    Annotated[ModelArch, Tag("arch")] | Annotated[ProfileRef, Tag("profile")],
    Discriminator(_model_kind),
]


def _is_none(value: object) -> bool:
    return value is None


def _is_one(value: object) -> bool:
    return value == 1


class Constraints(Frozen):
    """Narrow the search space. Every field is optional."""

    memory_cap_gib: float | None = Field(
        default=None, gt=0, description="per-GPU cap; default: the GPU's memory"
    )
    memory_reserve_gib: float = Field(
        default=1.0,
        ge=0,
        le=B.memory_gib,
        description="held back for CUDA context, NCCL and workspaces",
    )
    schedules: tuple[ScheduleName, ...] | None = None
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch_sizes: tuple[int, ...] | None = None
    zero_stages: tuple[int, ...] | None = None
    recompute: tuple[RecomputeMode, ...] | None = None
    sequence_parallel: bool | None = None
    tp_across_nodes: bool = False
    uniform_recompute: bool = Field(
        default=False, description="one recompute mode for every layer (no per-layer mix)"
    )
    framework: Framework | None = Field(
        default=None, description="consider only plans this framework can run"
    )
    # Context and expert parallel degrees (docs/moe.md). Left out of the JSON when unset, so
    # requests made before they existed keep their hash and their cached plans.
    cp: tuple[int, ...] | None = Field(
        default=None, exclude_if=_is_none, description="context parallel degrees to consider"
    )
    cp_comm: tuple[CpComm, ...] | None = Field(
        default=None, exclude_if=_is_none, description="K/V exchanges of cp to consider"
    )
    ep: tuple[int, ...] | None = Field(
        default=None, exclude_if=_is_none, description="expert parallel degrees to consider"
    )
    etp: tuple[int, ...] | None = Field(
        default=None, exclude_if=_is_none, description="expert tensor parallel degrees"
    )

    @field_validator("tp", "pp", "dp", "vpp", "micro_batch_sizes", "cp", "ep", "etp")
    @classmethod
    def _positive(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None:
            if not v:
                raise ValueError("must not be empty (leave it out for no constraint)")
            bad = [x for x in v if x <= 0]
            if bad:
                raise ValueError(f"values must be positive, got {bad}")
        return v

    @field_validator("zero_stages")
    @classmethod
    def _zero(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None:
            bad = [x for x in v if x not in (0, 1, 2, 3)]
            if bad or not v:
                raise ValueError(f"ZeRO stages are 0, 1, 2 or 3; got {list(v)}")
        return v

    @field_validator("schedules", "recompute", "cp_comm")
    @classmethod
    def _nonempty(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and not v:
            raise ValueError(f"must not be empty; choose from {list(SCHEDULES)}")
        return v


class SearchOptions(Frozen):
    mode: Literal["optimal", "exhaustive"] = "optimal"
    time_limit_s: float = Field(default=30.0, gt=0, le=3600)
    top_k: int = Field(default=5, ge=0, le=50)
    workers: int = Field(default=2, ge=1, le=64, description="CP-SAT search workers")
    seed: int = Field(default=0, ge=0, description="CP-SAT random seed, for repeatable results")
    gap_tolerance: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="stop once the proven gap (incumbent / lower bound - 1) is at most this; "
        "0: prove the optimum (docs/search.md, Gap and status)",
    )


class CalibrationRef(Frozen):
    """The calibrated cost-model constants a request is planned with (a calibration document's
    id and constants, planner.calibrate); constants left out keep the catalog's defaults.
    `constants` absent: a calibration stored in the service, which fills them in by `id`."""

    id: str = Field(min_length=1, max_length=200)
    constants: dict[str, float] | None = None

    @field_validator("constants")
    @classmethod
    def _known(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is not None:
            Efficiency.from_dict(v)  # names known, values in range (ValueError names them)
        return v


class PlanRequest(Frozen):
    """What to plan: model, cluster, training, constraints, objective and search options."""

    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    constraints: Constraints = Constraints()
    objective: Literal["time", "bubble"] = "time"
    search: SearchOptions = SearchOptions()
    calibration: CalibrationRef | None = Field(
        default=None, description="cost-model constants from a calibration (meshplan calibrate)"
    )

    @model_validator(mode="after")
    def _check(self) -> PlanRequest:
        device = self.cluster.device
        cap = self.constraints.memory_cap_gib
        if cap is not None and cap > device.memory_gib:
            raise ValueError(
                f"constraints.memory_cap_gib={cap} exceeds the memory of {device.name} "
                f"({device.memory_gib} GiB)"
            )
        if cap is not None and self.constraints.memory_reserve_gib >= cap:
            raise ValueError(
                f"constraints.memory_reserve_gib={self.constraints.memory_reserve_gib} "
                f"leaves nothing under memory_cap_gib={cap}"
            )
        heads = self._heads()
        if self.constraints.tp is not None and heads is not None:
            a, kv = heads
            bad = [t for t in self.constraints.tp if a % t or kv % t]
            if bad:
                raise ValueError(
                    f"constraints.tp={list(self.constraints.tp)}: {bad} do not divide "
                    f"num_attention_heads={a} and num_kv_heads={kv}"
                )
        n = self.cluster.num_gpus
        for axis in ("tp", "pp", "dp"):
            vals: tuple[int, ...] | None = getattr(self.constraints, axis)
            if vals is not None and not any(n % v == 0 for v in vals):
                raise ValueError(
                    f"constraints.{axis}={list(vals)}: none divides cluster.num_gpus={n}"
                )
        mbs = self.constraints.micro_batch_sizes
        b = self.training.global_batch_size
        if mbs is not None and not any(b % x == 0 for x in mbs):
            raise ValueError(
                f"training.global_batch_size={b} is not divisible by any of "
                f"constraints.micro_batch_sizes={list(mbs)}"
            )
        profile = self.profile
        if profile is not None and profile.seq_length != self.training.seq_length:
            raise ValueError(
                f"training.seq_length={self.training.seq_length} differs from the profile's "
                f"seq_length={profile.seq_length}"
            )
        return self

    def _heads(self) -> tuple[int, int] | None:
        arch = self.arch
        return None if arch is None else (arch.num_attention_heads, arch.kv_heads)

    @property
    def arch(self) -> ModelArch | None:
        """The model's shapes when known (a family spec, or a profile that carries them)."""
        if isinstance(self.model, ModelArch):
            return self.model
        return self.model.profile.arch if self.model.profile is not None else None

    @property
    def profile(self) -> ModelProfile | None:
        return self.model.profile if isinstance(self.model, ProfileRef) else None

    @property
    def memory_cap_bytes(self) -> int:
        cap = self.constraints.memory_cap_gib
        return int((cap if cap is not None else self.cluster.device.memory_gib) * GIB)

    @property
    def reserve_bytes(self) -> int:
        return int(self.constraints.memory_reserve_gib * GIB)

    @property
    def model_hash(self) -> str:
        """Content hash of the model: the profile's own hash, or that of the shapes."""
        if isinstance(self.model, ModelArch):
            raw = self.model.model_dump_json().encode()
            return hashlib.sha256(raw).hexdigest()[:16]
        if self.model.profile is not None:
            return self.model.profile.model_hash
        return f"profile:{self.model.profile_id}"

    @property
    def model_name(self) -> str:
        if isinstance(self.model, ModelArch):
            return self.model.display_name
        if self.model.profile is not None:
            return self.model.profile.name
        return f"profile:{self.model.profile_id}"


class StageSpec(Frozen):
    """One stage: a contiguous layer range and a recompute mode per layer of it."""

    layers: tuple[int, int]
    recompute: tuple[RecomputeMode, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> StageSpec:
        first, end = self.layers
        if first < 0 or end <= first:
            raise ValueError(f"layers=[{first}, {end}) must be a non-empty range from 0")
        if self.recompute is not None and len(self.recompute) != end - first:
            raise ValueError(
                f"len(recompute)={len(self.recompute)} for {end - first} layers [{first}, {end})"
            )
        return self

    @property
    def num_layers(self) -> int:
        return self.layers[1] - self.layers[0]


class Candidate(Frozen):
    """A fully fixed configuration. `stages` absent: balanced split, `recompute` everywhere."""

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int = Field(default=1, gt=0)
    # Context and expert parallelism fold as in Megatron-Core (docs/moe.md): attention and
    # dense layers on tp x cp x dp x pp GPUs, expert layers on etp x ep x edp x pp of the same
    # GPUs. Left out of the JSON at their defaults, so candidates without them hash as before.
    cp: int = Field(default=1, gt=0, exclude_if=_is_one, description="context parallel")
    cp_comm: CpComm = Field(
        default="p2p",
        exclude_if=lambda v: v == "p2p",
        description="how cp ranks exchange K/V: a ring of p2p sends, or an all-gather",
    )
    ep: int = Field(default=1, gt=0, exclude_if=_is_one, description="expert parallel")
    etp: int = Field(default=1, gt=0, exclude_if=_is_one, description="expert tensor parallel")
    vpp: int = Field(default=1, gt=0)
    schedule: ScheduleName = "1f1b"
    micro_batch_size: int = Field(default=1, gt=0)
    zero_stage: int = Field(default=0, ge=0, le=3)
    sequence_parallel: bool = False
    recompute: RecomputeMode = "none"
    stages: tuple[StageSpec, ...] | None = None

    @model_validator(mode="after")
    def _check(self) -> Candidate:
        if self.schedule == "interleaved-1f1b" and self.vpp < 2:
            raise ValueError(f"schedule 'interleaved-1f1b' needs vpp >= 2, got vpp={self.vpp}")
        if self.schedule == "zbv" and self.vpp != 2:
            raise ValueError(f"schedule 'zbv' needs exactly 2 chunks per rank, got vpp={self.vpp}")
        if self.schedule in ("gpipe", "1f1b", "zb-h1") and self.vpp != 1:
            raise ValueError(
                f"schedule {self.schedule!r} runs one chunk per rank, got vpp={self.vpp}"
            )
        if self.sequence_parallel and self.tp == 1:
            raise ValueError(f"sequence_parallel=True needs tp > 1, got tp={self.tp}")
        check_expert_grid(tp=self.tp, cp=self.cp, dp=self.dp, ep=self.ep, etp=self.etp)
        if self.zero_stage >= 2 and self.pp > 1:
            raise ValueError(
                f"zero_stage={self.zero_stage} needs pp=1 (gradients and parameters are "
                f"sharded per micro-batch), got pp={self.pp}"
            )
        if self.stages is not None:
            n = self.pp * self.vpp
            if len(self.stages) != n:
                raise ValueError(
                    f"len(stages)={len(self.stages)}, needs pp*vpp = {n} "
                    f"(pp={self.pp}, vpp={self.vpp})"
                )
            for i in range(1, n):
                prev_end, first = self.stages[i - 1].layers[1], self.stages[i].layers[0]
                if first != prev_end:
                    raise ValueError(
                        f"stages[{i}].layers[0]={first}, but stages[{i - 1}] ends at layer "
                        f"{prev_end}"
                    )
            if self.stages[0].layers[0] != 0:
                raise ValueError(f"stages[0] must start at layer 0, not {self.stages[0].layers[0]}")
        return self

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def edp(self) -> int:
        """Expert data parallel: the replicas of each expert, tp*cp*dp / (etp*ep)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def num_microbatches(self, global_batch_size: int) -> int:
        per = self.dp * self.micro_batch_size
        if global_batch_size % per:
            raise ValueError(
                f"global_batch_size={global_batch_size} is not divisible by "
                f"dp*micro_batch_size={self.dp}*{self.micro_batch_size}={per}"
            )
        return global_batch_size // per
