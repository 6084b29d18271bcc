"""Launch configs: torchrun, Slurm and Kubernetes, for meshplan's runner and other frameworks.

    render(plan, deployment, target=..., framework=...) -> LaunchBundle
    unsupported(plan_or_candidate, framework, ...) -> list[str]   (empty when expressible)

Pure text generation: nothing here reads or writes files or runs processes.
"""

from planner.launch.capabilities import CAPABILITIES, FrameworkCaps, capabilities
from planner.launch.deployment import Deployment, LaunchBundle, LaunchFile
from planner.launch.render import FRAMEWORKS, TARGETS, Target, render, unsupported

__all__ = [
    "CAPABILITIES",
    "FRAMEWORKS",
    "TARGETS",
    "Deployment",
    "FrameworkCaps",
    "LaunchBundle",
    "LaunchFile",
    "Target",
    "capabilities",
    "render",
    "unsupported",
]
