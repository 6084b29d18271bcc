"""Slurm's job states, exit codes, times and job-completion records, mapped onto `JobStatus`.

Shared by the command-line and the REST transports. State names are Slurm's
(`squeue --help`, slurm/slurm.h `enum job_states` and its JOB_* flags, Slurm 22.05).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from api.submit.protocol import JobState, JobStatus

# Slurm state → our state. PREEMPTED counts as FAILED: the scheduler, not the user, ended the job
# (a preempted job that Slurm requeues shows as PENDING/REQUEUED instead). CONFIGURING (nodes
# booting for an allocated job) has not started the script yet, so it is PENDING.
SLURM_STATES: dict[str, JobState] = {
    "PENDING": "PENDING",
    "CONFIGURING": "PENDING",
    "REQUEUED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "SUSPENDED": "RUNNING",
    "STOPPED": "RUNNING",
    "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "RESIZING": "RUNNING",
    "UPDATE_DB": "RUNNING",
    "POWER_UP_NODE": "PENDING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED",
    "TIMEOUT": "FAILED",
    "NODE_FAIL": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "BOOT_FAIL": "FAILED",
    "DEADLINE": "FAILED",
    "PREEMPTED": "FAILED",
    "SPECIAL_EXIT": "FAILED",
    "CANCELLED": "CANCELLED",
    "REVOKED": "CANCELLED",
}

_NO_VALUE = {"", "N/A", "NONE", "UNKNOWN", "(NULL)", "0"}


def map_state(slurm_state: str) -> tuple[JobState, str | None]:
    """Our state for Slurm's, and a reason when the mapping loses information.

    `slurm_state` may carry sacct's suffix ("CANCELLED by 0") or several flags
    ("PENDING,REQUEUED" from the REST API); the first word decides. An unrecognised state counts
    as PENDING (not final, so it is polled again and resolved once Slurm finishes the job).
    """
    word = re.split(r"[\s,+]", slurm_state.strip().upper(), maxsplit=1)[0]
    state = SLURM_STATES.get(word)
    if state is None:
        return "PENDING", f"unrecognised Slurm state {slurm_state!r}"
    return state, None


def exit_code_from_wait_status(status: int) -> int:
    """The shell's exit code for a wait(2) status (squeue's `exit_code` field is the raw status):
    128 + signal when a signal ended the job, else the high byte (POSIX `WEXITSTATUS`)."""
    signal = status & 0x7F
    return 128 + signal if signal else (status >> 8) & 0xFF


def exit_code_from_pair(pair: str) -> int | None:
    """The exit code for Slurm's "code:signal" text (scontrol, sacct, jobcomp): 128 + signal when
    a signal ended the job, else the code; None when the text is not such a pair."""
    m = re.fullmatch(r"(\d+):(\d+)", pair.strip())
    if m is None:
        return None
    code, signal = int(m.group(1)), int(m.group(2))
    return 128 + signal if signal else code


def parse_time(text: str) -> datetime | None:
    """A Slurm time as an aware UTC datetime; None for "N/A", "Unknown", "None" or 0.

    Epoch seconds (SLURM_TIME_FORMAT=%s, the REST API) are exact; ISO text without a zone
    ("2026-12-01T17:56:35", the jobcomp file) is the host's local time, as Slurm writes it.
    """
    text = text.strip()
    if text.upper() in _NO_VALUE:
        return None
    if text.isdigit():
        return datetime.fromtimestamp(int(text), tz=UTC)
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def reason_for(slurm_state: str, slurm_reason: str | None) -> str | None:
    """The scheduler's words for a job: its raw state unless plain (RUNNING, COMPLETED...), and
    its reason unless "None" (e.g. "FAILED: NonZeroExitCode", "TIMEOUT", "PENDING: Resources")."""
    word = slurm_state.strip().upper()
    plain = word in {"RUNNING", "COMPLETED", "PENDING", "CANCELLED"}
    reason = (slurm_reason or "").strip()
    reason = "" if reason.upper() in _NO_VALUE else reason
    if plain and not reason:
        return None
    if plain:
        return f"{word}: {reason}" if word != "PENDING" else reason
    return f"{word}: {reason}" if reason else word


def build_status(
    *,
    slurm_state: str,
    slurm_reason: str | None,
    exit_code: int | None,
    start: datetime | None,
    end: datetime | None,
) -> JobStatus:
    """A `JobStatus` from one Slurm record. Start and end are kept only where they are facts:
    a pending job's StartTime is Slurm's estimate, a running job's EndTime its time limit."""
    state, unmapped = map_state(slurm_state)
    final = state in ("COMPLETED", "FAILED", "CANCELLED")
    return JobStatus(
        state=state,
        exit_code=exit_code if final else None,
        reason=unmapped or reason_for(slurm_state, slurm_reason),
        started_at=start if state != "PENDING" else None,
        finished_at=end if final else None,
        scheduler_state=slurm_state.strip(),
    )


_JOBCOMP_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_jobcomp(lines: Iterable[str], job_ids: Iterable[str]) -> dict[str, JobStatus]:
    """Statuses from jobcomp/filetxt records (one `Key=Value ...` line per finished job) for the
    ids asked; the last record of an id wins (a requeued job is recorded once per run)."""
    wanted = set(job_ids)
    found: dict[str, JobStatus] = {}
    for line in lines:
        fields = dict(_JOBCOMP_FIELD.findall(line))
        job_id = fields.get("JobId")
        if job_id not in wanted or "JobState" not in fields:
            continue
        found[job_id] = build_status(
            slurm_state=fields["JobState"],
            slurm_reason=None,
            exit_code=exit_code_from_pair(fields.get("ExitCode", "")),
            start=parse_time(fields.get("StartTime", "")),
            end=parse_time(fields.get("EndTime", "")),
        )
    return found


def forgotten(job_id: str) -> JobStatus:
    """The status of a job neither slurmctld nor accounting knows: FAILED, saying so."""
    return JobStatus(
        state="FAILED",
        reason=(
            f"job {job_id} is no longer known to slurmctld and has no accounting record; "
            "its outcome is unknown"
        ),
        scheduler_state=None,
    )
