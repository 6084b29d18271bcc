"""`SlurmCliSubmitter`: Slurm through its commands (sbatch, squeue, sacct, scancel, tail).

The commands run on the service host, or on a login node through `ssh` when
`SubmitConfig.slurm_ssh_host` is set (then the script travels on ssh's stdin and output files
are read on the login node).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from api.submit.config import SubmitConfig
from api.submit.protocol import (
    JobSpec,
    JobStatus,
    SubmissionRejected,
    SubmitterUnavailable,
)
from api.submit.slurm_states import (
    build_status,
    exit_code_from_pair,
    exit_code_from_wait_status,
    forgotten,
    parse_jobcomp,
    parse_time,
)

# Words with which Slurm's commands (and ssh) say the controller could not be reached.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Zero Bytes were transmitted|Communication connection failure|slurm_load_jobs error: "
    r"Unable to contact|Transport endpoint is not connected|Could not resolve hostname",
    re.IGNORECASE,
)
_ACCOUNTING_OFF = re.compile(r"accounting storage is disabled", re.IGNORECASE)
_SETS_OUTPUT = re.compile(r"^#SBATCH\s+(--output|-o)\b", re.MULTILINE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# squeue --Format fields, each ending in the "|" separator; SLURM_TIME_FORMAT=%s makes the times
# epoch seconds, so they do not depend on the login node's time zone.
_SQUEUE_FORMAT = "JobID:|,State:|,Reason:|,StartTime:|,EndTime:|,exit_code:|"
_SACCT_FIELDS = "JobIDRaw,State,ExitCode,Start,End,Reason"
# squeue/sacct accept a list of ids; this many per call keeps command lines short.
_IDS_PER_CALL = 500
LOG_NAME = "meshplan-%j.out"
_HARMLESS_SCANCEL = ("Invalid job id", "already completing or completed")
_SLURM_TOOLS = frozenset({"sbatch", "squeue", "sacct", "scancel", "scontrol"})


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


class SlurmCliSubmitter:
    """Submit, follow and cancel Slurm jobs with the Slurm commands."""

    backend = "slurm"

    def __init__(self, config: SubmitConfig) -> None:
        self.config = config

    # --- running commands -------------------------------------------------------------------

    def _argv(self, argv: Sequence[str]) -> list[str]:
        tool, *args = argv
        if self.config.slurm_bin_dir and tool in {
            "sbatch",
            "squeue",
            "sacct",
            "scancel",
            "scontrol",
        }:
            tool = os.path.join(self.config.slurm_bin_dir, tool)
        full = ["env", "SLURM_TIME_FORMAT=%s", tool, *args]
        if self.config.slurm_ssh_host is None:
            return full
        return ["ssh", *self.config.slurm_ssh_options, self.config.slurm_ssh_host, shlex.join(full)]

    def run(self, argv: Sequence[str], *, stdin: str | None = None) -> CommandResult:
        """Run one command; SubmitterUnavailable when it cannot start, hangs, or says the
        controller (or the login node) cannot be reached."""
        full = self._argv(argv)
        try:
            done = subprocess.run(
                full,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.config.slurm_command_timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise self._unavailable(
                f"{argv[0]} did not answer within {self.config.slurm_command_timeout_s} s"
            ) from e
        except OSError as e:
            raise self._unavailable(f"cannot run {full[0]}: {e}") from e
        result = CommandResult(done.returncode, done.stdout, done.stderr)
        ssh_failed = self.config.slurm_ssh_host is not None and done.returncode == 255
        if done.returncode != 0 and (ssh_failed or _UNREACHABLE.search(done.stderr)):
            raise self._unavailable(f"{argv[0]}: {_one_line(done.stderr)}")
        return result

    def _unavailable(self, message: str) -> SubmitterUnavailable:
        return SubmitterUnavailable(message, retry_after_s=self.config.retry_after_s)

    # --- the protocol -----------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> str:
        args = ["sbatch", "--parsable", f"--job-name={spec.name}", f"--nodes={spec.nodes}"]
        # The operator's log directory wins over the script's own #SBATCH --output, so that
        # log_tail finds the file after slurmctld has purged the job; options["output"] beats both.
        log_dir = self.config.slurm_log_dir or spec.workdir or "/tmp"
        if "output" not in spec.options and (
            self.config.slurm_log_dir or not _SETS_OUTPUT.search(spec.script)
        ):
            args.append(f"--output={os.path.join(log_dir, LOG_NAME)}")
        if spec.workdir:
            args.append(f"--chdir={spec.workdir}")
        if spec.partition:
            args.append(f"--partition={spec.partition}")
        if spec.account:
            args.append(f"--account={spec.account}")
        if spec.time_limit_min is not None:
            args.append(f"--time={spec.time_limit_min}")
        for key, value in spec.options.items():
            args.append(f"--{key}={value}" if value != "" else f"--{key}")
        env = {**spec.env, **self.config.extra_env}
        done = self.run(args, stdin=with_exports(spec.script, env))
        if done.returncode != 0:
            raise SubmissionRejected(_one_line(done.stderr) or f"sbatch exit {done.returncode}")
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SubmissionRejected(f"sbatch printed no job id: {done.stdout.strip()!r}")
        return job_id

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        ids = list(dict.fromkeys(job_ids))
        found: dict[str, JobStatus] = {}
        for chunk in _chunks(ids):
            found.update(self._squeue(chunk))
        missing = [i for i in ids if i not in found]
        for chunk in _chunks(missing):
            found.update(self._accounting(chunk))
        return {i: found.get(i) or forgotten(i) for i in ids}

    def _squeue(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        done = self.run(
            [
                "squeue",
                "--noheader",
                "--states=all",
                f"--jobs={','.join(ids)}",
                f"--Format={_SQUEUE_FORMAT}",
            ]
        )
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            raise self._unavailable(f"squeue: {_one_line(done.stderr)}")
        found: dict[str, JobStatus] = {}
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 6 or parts[0].strip() not in ids:
                continue
            raw_exit = parts[5].strip()
            found[parts[0].strip()] = build_status(
                slurm_state=parts[1],
                slurm_reason=parts[2],
                exit_code=exit_code_from_wait_status(int(raw_exit)) if raw_exit.isdigit() else None,
                start=parse_time(parts[3]),
                end=parse_time(parts[4]),
            )
        return found

    def _accounting(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """Jobs slurmctld has purged: from sacct, or the jobcomp file where accounting is off."""
        done = self.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "--allocations",
                f"--jobs={','.join(ids)}",
                f"--format={_SACCT_FIELDS}",
            ]
        )
        if done.returncode == 0:
            found: dict[str, JobStatus] = {}
            for line in done.stdout.splitlines():
                parts = line.split("|")
                if len(parts) < 6 or parts[0] not in ids:
                    continue
                found[parts[0]] = build_status(
                    slurm_state=parts[1],
                    slurm_reason=parts[5],
                    exit_code=exit_code_from_pair(parts[2]),
                    start=parse_time(parts[3]),
                    end=parse_time(parts[4]),
                )
            return found
        if _ACCOUNTING_OFF.search(done.stderr) and self.config.slurm_jobcomp_file:
            return self._jobcomp(ids)
        return {}

    def _jobcomp(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        pattern = "JobId=(" + "|".join(re.escape(i) for i in ids) + ") "
        path = self.config.slurm_jobcomp_file or ""
        done = self.run(["grep", "-E", pattern, path])
        if done.returncode > 1:  # 1: no line matched
            raise self._unavailable(f"cannot read {path}: {_one_line(done.stderr)}")
        return parse_jobcomp(done.stdout.splitlines(), ids)

    def cancel(self, job_id: str) -> None:
        # scancel exits 0 even when it could not signal the job; --verbose makes it say why.
        # A finished, purged or never-known job is not an error: status() says which it was.
        done = self.run(["scancel", "--verbose", job_id])
        errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
        refused = [e for e in errors if not any(h in e for h in _HARMLESS_SCANCEL)]
        if refused or (done.returncode != 0 and not errors):
            raise SubmissionRejected(f"scancel {job_id}: {_one_line(done.stderr)}")

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        path = self._output_path(job_id)
        if path is None:
            return ""
        done = self.run(["tail", "-n", str(lines), "--", path])
        return done.stdout if done.returncode == 0 else ""

    def _output_path(self, job_id: str) -> str | None:
        """The job's output file: scontrol's StdOut while slurmctld knows the job, else where
        `submit` put it."""
        done = self.run(["scontrol", "show", "job", "--oneliner", job_id])
        m = re.search(r"\bStdOut=(\S+)", done.stdout) if done.returncode == 0 else None
        if m:
            return m.group(1)
        if self.config.slurm_log_dir:
            return os.path.join(self.config.slurm_log_dir, LOG_NAME.replace("%j", job_id))
        return None


def with_exports(script: str, env: dict[str, str]) -> str:
    """The script with `export NAME=value` lines after its leading comment block (the shebang and
    `#SBATCH` lines must stay first), so the environment also travels through ssh."""
    if not env:
        return script
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise SubmissionRejected(f"environment variable name {name!r} is not valid")
    lines = script.splitlines(keepends=True)
    at = 0
    while at < len(lines) and (lines[at].startswith("#") or not lines[at].strip()):
        at += 1
    exports = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items()]
    if at and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    return "".join(lines[:at] + exports + lines[at:])


def _chunks(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + _IDS_PER_CALL] for i in range(0, len(ids), _IDS_PER_CALL)]


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
