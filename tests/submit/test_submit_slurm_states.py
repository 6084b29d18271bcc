"""The Slurm → JobStatus mapping on Slurm's own texts (no cluster needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.submit import JobSpec, SubmissionRejected
from api.submit.slurm_cli import with_exports
from api.submit.slurm_states import (
    exit_code_from_pair,
    exit_code_from_wait_status,
    map_state,
    parse_jobcomp,
    parse_time,
)

# a record as jobcomp/filetxt writes it (Slurm 22.05, copied from the dev cluster's file)
JOBCOMP_LINE = (
    "JobId=3 UserId=root(0) GroupId=root(0) Name=wrap JobState=FAILED Partition=cpu "
    "TimeLimit=UNLIMITED StartTime=2026-12-01T17:56:57 EndTime=2026-12-01T17:56:58 "
    "NodeList=localhost NodeCnt=1 ProcCnt=1 WorkDir=/tmp ReservationName= "
    "Tres=cpu=1,mem=24151M,node=1,billing=1 Account= QOS= WcKey= Cluster=unknown "
    "SubmitTime=2026-12-01T17:56:57 EligibleTime=2026-12-01T17:56:57 DerivedExitCode=0:0 "
    "ExitCode=3:0"
)


@pytest.mark.parametrize(
    ("slurm", "ours"),
    [
        ("PENDING", "PENDING"),
        ("CONFIGURING", "PENDING"),
        ("REQUEUED", "PENDING"),
        ("RUNNING", "RUNNING"),
        ("COMPLETING", "RUNNING"),
        ("SUSPENDED", "RUNNING"),
        ("COMPLETED", "COMPLETED"),
        ("FAILED", "FAILED"),
        ("TIMEOUT", "FAILED"),
        ("NODE_FAIL", "FAILED"),
        ("OUT_OF_MEMORY", "FAILED"),
        ("BOOT_FAIL", "FAILED"),
        ("DEADLINE", "FAILED"),
        ("PREEMPTED", "FAILED"),
        ("CANCELLED", "CANCELLED"),
        ("CANCELLED by 0", "CANCELLED"),  # sacct's spelling
        ("PENDING,REQUEUED", "PENDING"),  # slurmrestd's flags
    ],
)
def test_slurm_states_map_onto_five(slurm: str, ours: str) -> None:
    assert map_state(slurm) == (ours, None)


def test_an_unknown_state_is_not_final_and_says_so() -> None:
    state, reason = map_state("WARPED")
    assert state == "PENDING"
    assert reason is not None and "WARPED" in reason


@pytest.mark.parametrize(
    ("status", "code"), [(0, 0), (3 << 8, 3), (255 << 8, 255), (9, 137), (15, 143)]
)
def test_wait_status_becomes_the_shells_exit_code(status: int, code: int) -> None:
    assert exit_code_from_wait_status(status) == code


@pytest.mark.parametrize(("pair", "code"), [("0:0", 0), ("3:0", 3), ("0:9", 137), ("x", None)])
def test_code_signal_pairs_become_the_shells_exit_code(pair: str, code: int | None) -> None:
    assert exit_code_from_pair(pair) == code


def test_times_epoch_and_absent() -> None:
    assert parse_time("1796148341") == datetime(
        2026, 12, 1, 18, 5, 41, tzinfo=UTC
    )  # date -u -d @1796148341
    assert [parse_time(t) for t in ("N/A", "Unknown", "None", "0", "")] == [None] * 5


def test_jobcomp_records_resolve_purged_jobs() -> None:
    found = parse_jobcomp([JOBCOMP_LINE, "JobId=30 JobState=COMPLETED ExitCode=0:0"], ["3", "4"])
    assert list(found) == ["3"]
    status = found["3"]
    assert (status.state, status.exit_code, status.scheduler_state) == ("FAILED", 3, "FAILED")
    assert status.started_at is not None and status.finished_at is not None
    assert (status.finished_at - status.started_at).total_seconds() == 1


def test_exports_go_after_the_sbatch_directives() -> None:
    script = "#!/bin/bash\n#SBATCH --nodes=1\n\nsrun hostname\n"
    out = with_exports(script, {"A": "x y", "B": "it's"})
    assert out == (
        "#!/bin/bash\n#SBATCH --nodes=1\n\nexport A='x y'\nexport B='it'\"'\"'s'\nsrun hostname\n"
    )
    with pytest.raises(SubmissionRejected, match="not valid"):
        with_exports(script, {"1BAD": "x"})


def test_job_spec_refuses_what_no_scheduler_takes() -> None:
    with pytest.raises(ValueError, match="nodes must be >= 1, got 0"):
        JobSpec(name="a", script="#!/bin/sh\n", nodes=0)
    with pytest.raises(ValueError, match="without whitespace"):
        JobSpec(name="a b", script="#!/bin/sh\n")
