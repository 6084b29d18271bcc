"""Job submission backends: one `Submitter` protocol, Slurm (commands or slurmrestd) and Kubernetes.

`make_submitter(backend, config)` builds the backend a `SubmitConfig` describes.
"""

from __future__ import annotations

from api.submit.config import SubmitConfig
from api.submit.protocol import (
    FINAL_STATES,
    JOB_STATES,
    JobSpec,
    JobState,
    JobStatus,
    SubmissionRejected,
    SubmitError,
    Submitter,
    SubmitterUnavailable,
)

__all__ = [
    "FINAL_STATES",
    "JOB_STATES",
    "JobSpec",
    "JobState",
    "JobStatus",
    "SubmissionRejected",
    "SubmitConfig",
    "SubmitError",
    "Submitter",
    "SubmitterUnavailable",
    "make_submitter",
]


def make_submitter(backend: str, config: SubmitConfig) -> Submitter:
    """The submitter for `backend` ("slurm" or "kubernetes") configured by `config`."""
    if backend == "slurm":
        if config.slurm_transport == "rest":
            from api.submit.slurm_rest import SlurmRestSubmitter

            return SlurmRestSubmitter(config)
        from api.submit.slurm_cli import SlurmCliSubmitter

        return SlurmCliSubmitter(config)
    if backend == "kubernetes":
        from api.submit.kubernetes import KubernetesSubmitter

        return KubernetesSubmitter(config)
    raise ValueError(f"unknown submission backend {backend!r}; known: 'slurm', 'kubernetes'")
