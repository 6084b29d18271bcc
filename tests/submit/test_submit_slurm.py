"""Both Slurm transports (the commands, slurmrestd) against the real single-node dev cluster
(deploy/slurm/dev-cluster.sh): each test runs once per transport unless it says otherwise."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import DEV_CLUSTER, cluster_status, wait_for

from api.submit import (
    JobSpec,
    SubmissionRejected,
    SubmitConfig,
    SubmitterUnavailable,
    make_submitter,
)
from api.submit.slurm_cli import SlurmCliSubmitter
from api.submit.slurm_rest import SlurmRestSubmitter

Slurm = SlurmCliSubmitter | SlurmRestSubmitter

pytestmark = pytest.mark.slurm

JOBCOMP = "/var/log/slurm/jobcomp.log"


@pytest.fixture(params=["cli", "rest"])
def cli(request: pytest.FixtureRequest, slurm_cluster: dict[str, str], tmp_path: Path) -> Slurm:
    log_dir = str(tmp_path)
    if request.param == "cli":
        config = SubmitConfig(slurm_log_dir=log_dir, slurm_jobcomp_file=JOBCOMP)
    else:
        socket = slurm_cluster.get("slurmrestd", "").removeprefix("unix:")
        if not socket:
            pytest.skip("the dev cluster runs no slurmrestd")
        config = SubmitConfig(slurm_transport="rest", slurmrestd_url="http://slurmrestd",
                              slurmrestd_socket=socket, slurm_log_dir=log_dir,
                              slurm_jobcomp_file=JOBCOMP)  # fmt: skip
    submitter = make_submitter("slurm", config)
    assert isinstance(submitter, SlurmCliSubmitter | SlurmRestSubmitter)
    return submitter


def spec(name: str, body: str, **kw: object) -> JobSpec:
    return JobSpec(name=name, script=f"#!/bin/bash\n#SBATCH --ntasks=1\n{body}\n", **kw)  # type: ignore[arg-type]


def test_trivial_job_completes_with_its_output(cli: Slurm, tmp_path: Path) -> None:
    job = cli.submit(spec("t-ok", 'echo "hello $GREETING from $PWD"', env={"GREETING": "a 'b' c"},
                          workdir=str(tmp_path)))  # fmt: skip
    assert job.isdigit()
    status = wait_for(cli, job, lambda s: s.final)
    assert (status.state, status.exit_code) == ("COMPLETED", 0)
    assert status.started_at is not None and status.finished_at is not None
    assert status.started_at <= status.finished_at
    assert cli.log_tail(job) == f"hello a 'b' c from {tmp_path}\n"


def test_failing_job_is_failed_with_its_exit_code_and_log(cli: Slurm) -> None:
    job = cli.submit(spec("t-fail", "echo about to fail; echo line two; exit 7"))
    status = wait_for(cli, job, lambda s: s.final)
    assert (status.state, status.exit_code) == ("FAILED", 7)
    assert status.reason is not None and "FAILED" in status.reason
    assert cli.log_tail(job, lines=1) == "line two\n"


def test_job_killed_by_a_signal_reports_128_plus_signal(cli: Slurm) -> None:
    job = cli.submit(spec("t-kill", "kill -KILL $$"))
    status = wait_for(cli, job, lambda s: s.final)
    assert (status.state, status.exit_code) == ("FAILED", 137)


def test_cancel_of_a_running_job_ends_cancelled(cli: Slurm) -> None:
    job = cli.submit(spec("t-cancel", "echo started; sleep 120"))
    wait_for(cli, job, lambda s: s.state == "RUNNING")
    cli.cancel(job)
    status = wait_for(cli, job, lambda s: s.final, timeout_s=30)
    assert status.state == "CANCELLED"
    assert status.finished_at is not None
    cli.cancel(job)  # cancelling a finished job is not an error


@pytest.mark.slow
def test_time_limit_ends_failed_with_timeout(cli: Slurm) -> None:
    if isinstance(cli, SlurmRestSubmitter):
        pytest.skip("one transport suffices: the state mapping is shared and this waits ~1 min")
    job = cli.submit(spec("t-timeout", "sleep 300", time_limit_min=1))
    status = wait_for(cli, job, lambda s: s.final, timeout_s=150)
    assert status.state == "FAILED"
    assert status.scheduler_state == "TIMEOUT"


def test_rejected_submission_names_the_schedulers_reason(cli: Slurm) -> None:
    with pytest.raises(SubmissionRejected, match=r"(?i)invalid partition"):
        cli.submit(spec("t-bad", "true", partition="no-such-partition"))


def test_unknown_job_is_failed_with_a_reason_and_cancelling_it_is_harmless(
    cli: Slurm,
) -> None:
    status = cli.status(["987654321"])["987654321"]
    assert status.state == "FAILED"
    assert status.reason is not None and "no longer known" in status.reason
    cli.cancel("987654321")
    assert cli.status(["987654321"])["987654321"] == status


def test_one_status_call_answers_for_many_jobs(cli: Slurm) -> None:
    jobs = [cli.submit(spec(f"t-many-{i}", f"exit {i}")) for i in range(4)]
    for job in jobs:
        wait_for(cli, job, lambda s: s.final)
    statuses = cli.status([*jobs, jobs[0]])
    assert sorted(statuses) == sorted(jobs)
    assert [statuses[j].exit_code for j in jobs] == [0, 1, 2, 3]


@pytest.mark.slow
def test_job_purged_by_slurmctld_is_resolved_from_accounting(cli: Slurm) -> None:
    job = cli.submit(spec("t-purge", "exit 5"))
    wait_for(cli, job, lambda s: s.final)
    # MinJobAge=5 s on the dev cluster; slurmctld purges old jobs about once a minute
    deadline = time.monotonic() + 150
    while _squeue_knows(job):
        assert time.monotonic() < deadline, f"slurmctld still remembers job {job}"
        time.sleep(2)
    status = cli.status([job])[job]
    assert (status.state, status.exit_code) == ("FAILED", 5)
    assert status.finished_at is not None


def _squeue_knows(job: str) -> bool:
    done = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={job}", "-o", "%i"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    # squeue exits 1 ("Invalid job id specified") for a single id it does not know
    return done.stdout.strip() == job


@pytest.mark.slow
def test_slurmctld_down_is_unavailable_and_status_recovers(cli: Slurm) -> None:
    if os.geteuid() != 0:
        pytest.skip("stopping and restarting slurmctld needs root")
    job = cli.submit(spec("t-outage", "echo survived; sleep 2"))
    pid = Path("/run/slurm/slurmctld.pid").read_text().strip()
    subprocess.run(["kill", pid], check=True)
    try:
        _wait_gone(pid)
        with pytest.raises(SubmitterUnavailable, match="Unable to contact slurm controller"):
            cli.submit(spec("t-outage-2", "true"))
        with pytest.raises(SubmitterUnavailable) as info:
            cli.status([job])
        assert info.value.retry_after_s == 30
    finally:
        subprocess.run([str(DEV_CLUSTER), "up"], check=True, capture_output=True)
    assert cluster_status(), "dev-cluster.sh up did not bring the cluster back"
    status = wait_for(cli, job, lambda s: s.final, timeout_s=60)
    assert (status.state, status.exit_code) == ("COMPLETED", 0)
    assert cli.log_tail(job) == "survived\n"


def _wait_gone(pid: str) -> None:
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    pytest.fail(f"slurmctld {pid} did not stop")
