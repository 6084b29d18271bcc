"""SlurmCliSubmitter through ssh to a "login node": a real sshd on 127.0.0.1 (started by this
test with its own host key, port and authorized key) in front of the real dev cluster."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for

from api.submit import JobSpec, SubmitConfig, SubmitterUnavailable, make_submitter
from api.submit.slurm_cli import SlurmCliSubmitter

pytestmark = pytest.mark.slurm

SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def login_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(port, client key) of an sshd that lets root in with that key only."""
    if not SSHD.exists() or os.geteuid() != 0:
        pytest.skip("needs root and openssh-server (deploy/slurm/dev-cluster.sh up installs it)")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)],
                       check=True)  # fmt: skip
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    sshd = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert sshd.poll() is None, sshd.stderr.read() if sshd.stderr else ""
            assert time.monotonic() < deadline, "sshd did not listen"
            time.sleep(0.05)
        yield port, d / "client_key"
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


def _options(port: int, key: Path) -> tuple[str, ...]:
    return ("-p", str(port), "-i", str(key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR")  # fmt: skip


@pytest.fixture
def over_ssh(
    slurm_cluster: dict[str, str], login_node: tuple[int, Path], tmp_path: Path
) -> SlurmCliSubmitter:
    port, key = login_node
    config = SubmitConfig(slurm_ssh_host="root@127.0.0.1", slurm_ssh_options=_options(port, key),
                          slurm_log_dir=str(tmp_path),
                          slurm_jobcomp_file="/var/log/slurm/jobcomp.log")  # fmt: skip
    submitter = make_submitter("slurm", config)
    assert isinstance(submitter, SlurmCliSubmitter)
    return submitter


def test_jobs_submitted_followed_and_cancelled_through_ssh(over_ssh: SlurmCliSubmitter) -> None:
    ok = over_ssh.submit(JobSpec(name="ssh-ok", script="#!/bin/bash\necho \"via $HOW\"\nexit 4\n",
                                 env={"HOW": "the login node's sshd"}))  # fmt: skip
    long = over_ssh.submit(JobSpec(name="ssh-long", script="#!/bin/bash\nsleep 120\n"))
    status = wait_for(over_ssh, ok, lambda s: s.final)
    assert (status.state, status.exit_code) == ("FAILED", 4)
    assert over_ssh.log_tail(ok) == "via the login node's sshd\n"
    wait_for(over_ssh, long, lambda s: s.state == "RUNNING")
    over_ssh.cancel(long)
    assert wait_for(over_ssh, long, lambda s: s.final).state == "CANCELLED"


def test_an_unreachable_login_node_is_unavailable(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    nobody_listens = _options(_free_port(), tmp_path / "no-key")
    config = SubmitConfig(slurm_ssh_host="root@127.0.0.1", slurm_ssh_options=nobody_listens)
    submitter = make_submitter("slurm", config)
    with pytest.raises(SubmitterUnavailable, match="Connection refused"):
        submitter.status(["1"])
    with pytest.raises(SubmitterUnavailable):
        submitter.submit(JobSpec(name="x", script="#!/bin/sh\ntrue\n"))
