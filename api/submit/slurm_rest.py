"""`SlurmRestSubmitter`: Slurm through slurmrestd's REST API (OpenAPI plugin v0.0.38, Slurm 22.05).

Authentication: a JWT in X-SLURM-USER-NAME / X-SLURM-USER-TOKEN (rest_auth/jwt; the cluster needs
`AuthAltTypes=auth/jwt`), or none over a UNIX socket (rest_auth/local: slurmrestd takes the
connecting process's uid). Endpoints used: POST /job/submit, GET /jobs (all jobs slurmctld holds:
the v0.0.38 API has no multi-id query, so one poll is one GET), DELETE /job/{id}, GET /job/{id}.
slurmrestd serves no job output: `log_tail` reads the job's output file where the service host
sees it (a shared file system), and purged jobs are read from the jobcomp file when configured.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from api.submit.config import SubmitConfig
from api.submit.protocol import (
    JobSpec,
    JobStatus,
    SubmissionRejected,
    SubmitterUnavailable,
)
from api.submit.slurm_states import (
    build_status,
    exit_code_from_wait_status,
    forgotten,
    parse_jobcomp,
    parse_time,
)

# slurm_errno values (slurm/slurm_errno.h) meaning slurmctld could not be reached:
# SLURM_COMMUNICATIONS_* (1001-1004), SLURMCTLD_COMMUNICATIONS_* (1800-1804), socket timeout (5004)
_UNREACHABLE_ERRNOS = {*range(1001, 1005), *range(1800, 1805), 5004}
_INVALID_JOB_ID = 2017
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class SlurmRestSubmitter:
    """Submit, follow and cancel Slurm jobs through slurmrestd."""

    backend = "slurm"

    def __init__(self, config: SubmitConfig, *, client: httpx.Client | None = None) -> None:
        self.config = config
        self._client = client or _client(config)
        self._prefix = f"/slurm/{config.slurmrestd_api_version}"

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; SubmitterUnavailable for transport failures, 5xx without a Slurm answer,
        and Slurm's own 'cannot contact slurmctld' errors."""
        try:
            r = self._client.request(method, self._prefix + path, json=body)
        except httpx.HTTPError as e:
            raise self._unavailable(f"slurmrestd: {type(e).__name__}: {e}") from e
        try:
            doc: dict[str, Any] = r.json()
        except ValueError:
            if r.status_code >= 500 or r.status_code in (401, 403):
                raise self._unavailable(
                    f"slurmrestd answered {r.status_code}: {r.text[:200]}"
                ) from None
            raise SubmissionRejected(
                f"slurmrestd answered {r.status_code}: {r.text[:200]}"
            ) from None
        for err in doc.get("errors") or []:
            if _errno(err) in _UNREACHABLE_ERRNOS:
                raise self._unavailable(f"slurmrestd: {_describe(err)}")
        return doc

    def _unavailable(self, message: str) -> SubmitterUnavailable:
        return SubmitterUnavailable(message, retry_after_s=self.config.retry_after_s)

    def submit(self, spec: JobSpec) -> str:
        env = {"PATH": _DEFAULT_PATH, **spec.env, **self.config.extra_env}
        log_dir = self.config.slurm_log_dir or spec.workdir or "/tmp"
        job: dict[str, Any] = {
            "name": spec.name,
            "nodes": spec.nodes,
            "environment": env,
            "current_working_directory": spec.workdir or log_dir,
            "standard_output": os.path.join(log_dir, "meshplan-%j.out"),
        }
        if spec.partition:
            job["partition"] = spec.partition
        if spec.account:
            job["account"] = spec.account
        if spec.time_limit_min is not None:
            job["time_limit"] = spec.time_limit_min
        for key, value in spec.options.items():  # v0.0.38 job properties, sbatch's names
            job[key.replace("-", "_")] = _option_value(value)
        doc = self._call("POST", "/job/submit", {"script": spec.script, "job": job})
        # A job id means the job exists; errors beside it are notes (ESLURM_JOB_HELD for --hold).
        if doc.get("job_id"):
            return str(doc["job_id"])
        reason = "; ".join(_describe(e) for e in doc.get("errors") or []) or "no job id"
        raise SubmissionRejected(f"slurmrestd refused the job: {reason}")

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        doc = self._call("GET", "/jobs")
        if doc.get("errors"):  # with slurmctld down: -1 "Failed while looking for jobs"
            raise self._unavailable("slurmrestd: " + "; ".join(map(_describe, doc["errors"])))
        wanted = set(ids)
        found = {
            str(j["job_id"]): _job_status(j)
            for j in doc.get("jobs", [])
            if str(j["job_id"]) in wanted
        }
        missing = [i for i in ids if i not in found]
        if missing and self.config.slurm_jobcomp_file:
            found.update(_read_jobcomp(self.config.slurm_jobcomp_file, missing))
        return {i: found.get(i) or forgotten(i) for i in ids}

    def _job(self, job_id: str) -> dict[str, Any] | None:
        doc = self._call("GET", f"/job/{job_id}")
        jobs = doc.get("jobs") or []
        return jobs[0] if jobs else None

    def cancel(self, job_id: str) -> None:
        doc = self._call("DELETE", f"/job/{job_id}")
        errors = doc.get("errors") or []
        if not errors:
            return
        if any(_errno(e) == _INVALID_JOB_ID for e in errors):
            return  # finished and purged, or never known: status() says which
        message = "; ".join(_describe(e) for e in errors)
        if "already completing or completed" in message.lower():
            return
        raise SubmissionRejected(f"slurmrestd refused to cancel job {job_id}: {message}")

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        job = self._job(job_id)
        if job is not None and job.get("standard_output"):
            raw = str(job["standard_output"])
            path = raw.replace("%j", job_id).replace("%x", str(job.get("name", "")))
        elif self.config.slurm_log_dir:
            path = os.path.join(self.config.slurm_log_dir, f"meshplan-{job_id}.out")
        else:
            return ""
        return _tail(Path(path), lines)


def _option_value(value: str) -> object:
    """An option's JSON value: "" is a flag (true, as `--hold` is for sbatch), digits a number."""
    if value == "":
        return True
    return int(value) if value.isdigit() else value


def _client(config: SubmitConfig) -> httpx.Client:
    headers = {}
    if config.slurmrestd_token:
        headers["X-SLURM-USER-TOKEN"] = config.slurmrestd_token
        if config.slurmrestd_user:
            headers["X-SLURM-USER-NAME"] = config.slurmrestd_user
    transport = (
        httpx.HTTPTransport(uds=config.slurmrestd_socket) if config.slurmrestd_socket else None
    )
    return httpx.Client(
        base_url=config.slurmrestd_url or "http://slurmrestd",
        headers=headers,
        timeout=config.slurm_command_timeout_s,
        transport=transport,
    )


def _job_status(job: dict[str, Any]) -> JobStatus:
    raw_exit = job.get("exit_code")
    return build_status(
        slurm_state=str(job.get("job_state", "")),
        slurm_reason=job.get("state_reason"),
        exit_code=exit_code_from_wait_status(int(raw_exit)) if isinstance(raw_exit, int) else None,
        start=parse_time(str(job.get("start_time", ""))),
        end=parse_time(str(job.get("end_time", ""))),
    )


def _read_jobcomp(path: str, ids: Sequence[str]) -> dict[str, JobStatus]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_jobcomp(f, ids)
    except OSError:
        return {}


def _tail(path: Path, lines: int, max_bytes: int = 256 * 1024) -> str:
    """The last `lines` lines of the file, reading at most its last `max_bytes`."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = text.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return "".join(kept)


def _errno(err: dict[str, Any]) -> object:
    """An error's slurm_errno (/job/submit calls it error_code, the rest error_number)."""
    return err.get("error_number", err.get("error_code"))


def _describe(err: dict[str, Any]) -> str:
    parts = [str(err.get(k)) for k in ("error", "description") if err.get(k)]
    return ": ".join(parts) or str(err)
