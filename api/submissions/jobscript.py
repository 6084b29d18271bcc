"""The job a submission sends: the launch renderer's script for the plan, made self-contained.

The Slurm script is `planner.launch.render`'s sbatch script with the bundle's other files (the
plan JSON, framework configs) written by the script itself into its own directory
`<deployment.workdir>/meshplan-<submission id>` before it `cd`s there: the job needs nothing
copied to the cluster ahead of it, so every transport (local commands, ssh, slurmrestd) submits
the same text. Kubernetes gets the PyTorchJob manifest (with its ConfigMap of the same files).
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass

from pydantic import Field, field_validator

from api.submit import JobSpec
from planner.errors import SpecError
from planner.launch import Deployment, LaunchBundle, render
from planner.launch.common import layout
from planner.launch.kubernetes import PYTORCHJOB_FILE
from planner.launch.slurm import SCRIPT
from planner.plan import Plan

MAX_NAME = 63  # a DNS-1123 label (the Kubernetes job name)
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SubmissionDeployment(Deployment):
    """What `meshplan launch` takes, plus the backend's own options (sbatch long options
    without dashes, e.g. {"qos": "high"}; Kubernetes extras)."""

    options: dict[str, str] = Field(default_factory=dict, description="backend-specific options")

    @field_validator("time", "output", "error", "partition", "account", "image", "workdir")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        """These become `#SBATCH` lines: a line break would add directives of its own."""
        if v is not None and any(c in v for c in "\n\r\x00"):
            raise ValueError(f"{v!r} must be one line")
        return v

    def launch_fields(self) -> Deployment:
        return Deployment.model_validate(self.model_dump(exclude={"options"}))


@dataclass(frozen=True)
class ReportTarget:
    """Where and with what the job posts its RunReport (profiler.run_plan's options)."""

    url: str
    token: str
    plan_id: str

    def argv(self) -> tuple[str, ...]:
        return ("--report-url", self.url, "--api-key", self.token, "--plan-id", self.plan_id)


def job_name(base: str, submission_id: str) -> str:
    """`<base>-<8 hex of the id>`: unique per submission, still a DNS-1123 label."""
    suffix = "-" + submission_id[:8]
    return base[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def job_dir(workdir: str, submission_id: str) -> str:
    return f"{workdir.rstrip('/')}/meshplan-{submission_id}"


def time_limit_min(value: str) -> int | None:
    """Slurm's time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in whole minutes, rounded up;
    None when `value` is none of them (Slurm then judges the script's own --time)."""
    m = _TIME.match(value.strip())
    if m is None:
        return None
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    assert a is not None
    if days is not None:  # D-H[:M[:S]]
        seconds = ((days * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    elif c is not None:  # H:M:S
        seconds = (a * 60 + (b or 0)) * 60 + c
    elif b is not None:  # M:S
        seconds = a * 60 + b
    else:  # M
        seconds = a * 60
    return max(1, -(-seconds // 60))


def render_deployment(
    dep: SubmissionDeployment,
    *,
    backend: str,
    submission_id: str,
    report: ReportTarget | None,
) -> Deployment:
    """The deployment the renderer gets: a unique job name, the job's own directory (Slurm),
    and the report options after the user's trainer arguments."""
    update: dict[str, object] = {"job_name": job_name(dep.job_name, submission_id)}
    if backend == "slurm":
        if not dep.workdir.startswith("/"):
            raise SpecError(
                "deployment.workdir",
                dep.workdir,
                "a Slurm submission needs an absolute working directory on the cluster",
            )
        update["workdir"] = job_dir(dep.workdir, submission_id)
    if report is not None:
        update["entry_args"] = (*dep.entry_args, *report.argv())
    return dep.launch_fields().model_copy(update=update)


def slurm_script(bundle: LaunchBundle, directory: str, *, own_error_file: bool) -> str:
    """The sbatch script with the bundle's other files written into `directory` first. Unless
    the deployment named its own error file, stderr goes where stdout goes (the submitter
    chooses that file), so the log tail shows both."""
    lines = bundle.file(SCRIPT).content.splitlines()
    if not own_error_file:
        lines = [line for line in lines if not line.startswith("#SBATCH --error=")]
    if "set -eu" not in lines:
        raise ValueError(f"the rendered {SCRIPT} has no 'set -eu' line to add the files after")
    at = lines.index("set -eu") + 1
    block = [f"mkdir -p {shlex.quote(directory)}"]
    for f in bundle.files:
        if f.name == SCRIPT:
            continue
        delimiter = _delimiter(f.content)
        path = shlex.quote(f"{directory}/{f.name}")
        block += [f"cat > {path} <<'{delimiter}'", *f.content.rstrip("\n").split("\n"), delimiter]
        block.append(f"chmod {f.mode:o} {path}")
    return "\n".join([*lines[:at], *block, *lines[at:]]) + "\n"


def build_job(
    plan: Plan,
    dep: SubmissionDeployment,
    *,
    backend: str,
    framework: str,
    submission_id: str,
    report: ReportTarget | None,
) -> JobSpec:
    """The JobSpec for one submission. Raises SpecError / UnsupportedPlanError from the
    renderer (422 problems naming the field / every reason)."""
    launch = render_deployment(dep, backend=backend, submission_id=submission_id, report=report)
    target = "slurm" if backend == "slurm" else "kubernetes"
    bundle = render(plan, launch, target=target, framework=framework)  # type: ignore[arg-type]
    if backend == "slurm":
        own_error = "error" in dep.model_fields_set
        script = slurm_script(bundle, launch.workdir, own_error_file=own_error)
    else:
        script = bundle.file(PYTORCHJOB_FILE).content
    return JobSpec(
        name=launch.job_name,
        script=script,
        workdir=dep.workdir or None,
        partition=dep.partition,
        account=dep.account,
        time_limit_min=time_limit_min(dep.time),
        nodes=layout(plan, launch).nodes,
        options=dict(dep.options),
    )


def _delimiter(content: str) -> str:
    while True:
        word = f"MESHPLAN_EOF_{secrets.token_hex(4)}"
        if word not in content:
            return word
