"""What a framework emitter hands the launch targets: the trainer's command line and files."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.launch.deployment import Deployment, LaunchFile


@dataclass(frozen=True)
class Trainer:
    """The part of a launch that follows torchrun's own options, plus what it needs.

    `argv` is what torchrun receives after its options: `-m module args...` or `script args...`.
    `files` are config files the trainer reads; `argv` names them under the `config_dir` the
    target chose (the working directory, or a mounted ConfigMap on Kubernetes).
    """

    argv: tuple[str, ...]
    files: tuple[LaunchFile, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())


def entry(dep: Deployment, *, module: str | None, script: str | None) -> tuple[str, ...]:
    """`-m module` or `script`: the deployment's choice, else the framework's default."""
    if dep.entry_script is not None:
        return (dep.entry_script,)
    if dep.entry_module is not None:
        return ("-m", dep.entry_module)
    if module is not None:
        return ("-m", module)
    assert script is not None  # every framework gives one default
    return (script,)
