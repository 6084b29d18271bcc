"""What a launch needs besides the plan: where it runs, what it runs, and the bundle it gets back.

`Deployment()` works as is: one command per node for a single machine, meshplan's runner,
the rendezvous on port 29500. Every field is optional and validated on construction.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from planner.specs.base import Frozen

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class Deployment(Frozen):
    """Where and how to launch a plan. Defaults give a single-node torchrun launch."""

    # where
    nodes: int | None = Field(
        default=None, gt=0, description="node count; default: len(hosts), or num_gpus / 8"
    )
    gpus_per_node: int | None = Field(
        default=None, gt=0, description="processes (GPUs) per node; default num_gpus / nodes"
    )
    hosts: tuple[str, ...] = Field(
        default=(), description="host names in node-rank order; hosts[0] is the rendezvous host"
    )
    image: str | None = Field(default=None, description="container image (Slurm/Kubernetes)")
    workdir: str = Field(
        default="", description="working directory; default '.' ('/workspace' in a container)"
    )
    # what
    entry_module: str | None = Field(default=None, description="python module to run (-m)")
    entry_script: str | None = Field(default=None, description="script to run instead of a module")
    entry_args: tuple[str, ...] = Field(
        default=(), description="extra arguments for the trainer, after the framework's own"
    )
    steps: int | None = Field(default=None, gt=0, description="training steps (iterations)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables")
    omp_num_threads: int = Field(default=1, gt=0, description="OMP_NUM_THREADS per process")
    nccl_debug: str | None = Field(default=None, description="NCCL_DEBUG (e.g. WARN, INFO)")
    nccl_socket_ifname: str | None = Field(default=None, description="NCCL_SOCKET_IFNAME")
    nccl_ib_hca: str | None = Field(default=None, description="NCCL_IB_HCA")
    # rendezvous
    port: int = Field(default=29500, ge=1, le=65535, description="c10d rendezvous port")
    rdzv_id: str | None = Field(default=None, description="default: meshplan-<model hash>")
    max_restarts: int = Field(default=0, ge=0)
    # Slurm
    job_name: str = Field(default="meshplan", description="Slurm job name / Kubernetes name")
    partition: str | None = None
    account: str | None = None
    time: str = Field(default="01:00:00", description="Slurm time limit")
    output: str = Field(default="%x-%j.out", description="Slurm --output path")
    error: str = Field(default="%x-%j.err", description="Slurm --error path")
    cpus_per_task: int | None = Field(default=None, gt=0)
    # Kubernetes
    namespace: str = "default"
    elastic: bool = Field(default=False, description="PyTorchJob elasticPolicy (c10d rendezvous)")
    # frameworks
    torchtitan_flavor: str | None = Field(
        default=None, description="torchtitan llama3 flavor F: the config function llama3_F"
    )
    deepspeed_layer_class: str = Field(
        default="DecoderLayer", description="class name of the decoder block (DeepSpeed partition)"
    )

    @model_validator(mode="after")
    def _one_entry(self) -> Deployment:
        if self.entry_module is not None and self.entry_script is not None:
            raise ValueError(
                f"give entry_module={self.entry_module!r} or entry_script="
                f"{self.entry_script!r}, not both"
            )
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"invalid environment variable names {bad}")
        return v

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [h for h in v if not _HOST.match(h)]
        if bad:
            raise ValueError(f"invalid host names {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"host names repeat: {list(v)}")
        return v

    @field_validator("job_name", "namespace")
    @classmethod
    def _dns(cls, v: str) -> str:
        if len(v) > 63 or not _DNS_LABEL.match(v):
            raise ValueError(
                f"{v!r} must be a DNS-1123 label (lower-case letters, digits, '-', <= 63 chars)"
            )
        return v

    @field_validator("entry_module")
    @classmethod
    def _module(cls, v: str | None) -> str | None:
        if v is not None and not _MODULE.match(v):
            raise ValueError(f"{v!r} is not a dotted python module name")
        return v


class LaunchFile(Frozen):
    name: str = Field(description="relative path of the file")
    content: str
    mode: int = Field(default=0o644, description="file permission bits, e.g. 0o755 for scripts")


class LaunchBundle(Frozen):
    """What `render` returns and the API serves: `{"files", "commands", "notes"}`."""

    files: tuple[LaunchFile, ...]
    commands: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def file(self, name: str) -> LaunchFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"no file {name!r} in the bundle; files: {[f.name for f in self.files]}")
