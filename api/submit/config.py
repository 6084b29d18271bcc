"""`SubmitConfig`: how the service reaches its schedulers. Plain frozen data, handed in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SlurmTransport = Literal["cli", "rest"]


@dataclass(frozen=True, kw_only=True)
class SubmitConfig:
    """Every knob of the submission backends; the defaults fit the dev cluster on localhost."""

    slurm_transport: SlurmTransport = "cli"
    """"cli": run sbatch/squeue/sacct/scancel; "rest": talk to slurmrestd over HTTP with a JWT."""

    slurm_ssh_host: str | None = None
    """Login node to run the Slurm commands on through `ssh` (e.g. "user@login1"); None runs them
    on the service host."""

    slurm_ssh_options: tuple[str, ...] = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
    """Extra `ssh` arguments, placed before the host."""

    slurm_bin_dir: str | None = None
    """Directory holding sbatch, squeue, sacct, scancel; None finds them on PATH."""

    slurm_log_dir: str | None = None
    """Directory for job output files (`<dir>/<name>-<jobid>.out`); None puts them in the job's
    working directory, or in /tmp when it has none. Must be readable by the service (on the login
    node with ssh) for `log_tail`."""

    slurm_jobcomp_file: str | None = None
    """A jobcomp/filetxt file (JobCompLoc) to read for jobs slurmctld has purged, used when `sacct`
    answers that accounting is disabled (clusters without slurmdbd, like the dev cluster). Read on
    the login node with ssh, on the service host otherwise."""

    slurm_command_timeout_s: float = 30.0
    """A Slurm command or REST request slower than this counts as the scheduler unreachable."""

    slurmrestd_url: str | None = None
    """Base URL of slurmrestd, e.g. "http://127.0.0.1:6820" (transport "rest"); with
    `slurmrestd_socket` set, only its path prefix matters ("http://slurmrestd")."""

    slurmrestd_socket: str | None = None
    """UNIX socket slurmrestd listens on (rest_auth/local: the service's own uid is the Slurm
    user, no JWT); None connects over TCP to `slurmrestd_url`."""

    slurmrestd_user: str | None = None
    """The Slurm user the JWT belongs to (X-SLURM-USER-NAME); sent only with a token."""

    slurmrestd_token: str | None = None
    """The JWT (X-SLURM-USER-TOKEN), e.g. from `scontrol token`."""

    slurmrestd_api_version: str = "v0.0.38"
    """The slurmrestd OpenAPI plugin version in URLs (`/slurm/<version>/...`); Slurm 22.05 serves
    v0.0.36 to v0.0.38 and the submitter speaks v0.0.38's documents."""

    kubernetes_namespace: str = "default"
    """Namespace the PyTorchJobs are created in."""

    kubernetes_kubeconfig: str | None = None
    """Path of a kubeconfig; None (and no `kubernetes_host`) uses the in-cluster service account."""

    kubernetes_context: str | None = None
    """kubeconfig context to use; None is the file's current context."""

    kubernetes_host: str | None = None
    """API server URL used instead of any kubeconfig (with `kubernetes_token`)."""

    kubernetes_token: str | None = None
    """Bearer token for `kubernetes_host`."""

    kubernetes_verify_ssl: bool = True
    """Verify the API server's certificate when `kubernetes_host` is used."""

    retry_after_s: int = 30
    """The `Retry-After` suggested when a scheduler is unreachable."""

    extra_env: dict[str, str] = field(default_factory=dict)
    """Environment added to every submitted job (after the JobSpec's own env is applied)."""

    def __post_init__(self) -> None:
        if self.slurm_transport not in ("cli", "rest"):
            raise ValueError(
                f"slurm_transport must be 'cli' or 'rest', got {self.slurm_transport!r}"
            )
        if self.slurm_command_timeout_s <= 0:
            raise ValueError(
                f"slurm_command_timeout_s must be > 0, got {self.slurm_command_timeout_s}"
            )
        if self.retry_after_s < 1:
            raise ValueError(f"retry_after_s must be >= 1, got {self.retry_after_s}")
        if self.slurm_transport == "rest" and not self.slurmrestd_url:
            raise ValueError("slurm_transport 'rest' needs slurmrestd_url")
        if self.kubernetes_host is not None and self.kubernetes_kubeconfig is not None:
            raise ValueError("set kubernetes_host or kubernetes_kubeconfig, not both")
