"""`KubernetesSubmitter`: Kubeflow PyTorchJobs (kubeflow.org/v1) through the official `kubernetes`
client.

The job text is a manifest (YAML or JSON) holding one PyTorchJob and optionally ConfigMaps — what
`planner.launch` renders as pytorchjob.yaml. The job id is "<namespace>/<name>". Status comes
from the PyTorchJob's conditions (Created, Running, Restarting, Succeeded, Failed, Suspended; the
training-operator keeps the latest one True), the exit code from the master pod's `pytorch`
container, the log tail from that container's log. Cancel deletes the PyTorchJob (foreground,
so its pods go with it) and its ConfigMaps; a PyTorchJob that no longer exists reads CANCELLED.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from api.submit.config import SubmitConfig
from api.submit.kubernetes_manifest import (
    CONTAINER,
    GROUP,
    MANAGED_BY,
    MANAGER,
    PLURAL,
    VERSION,
    parse_documents,
    prepare,
)
from api.submit.protocol import (
    JobSpec,
    JobState,
    JobStatus,
    SubmissionRejected,
    SubmitterUnavailable,
)

JOB_LABEL = "meshplan.io/job"  # the JobSpec's name
OWNER_LABEL = "meshplan.io/pytorchjob"  # on the ConfigMaps: the PyTorchJob they belong to
# labels the training-operator puts on a PyTorchJob's pods
OPERATOR_JOB_NAME = "training.kubeflow.org/job-name"
OPERATOR_REPLICA_TYPE = "training.kubeflow.org/replica-type"


class KubernetesSubmitter:
    """Create, follow and delete PyTorchJobs in one namespace (ids carry their namespace)."""

    backend = "kubernetes"

    def __init__(self, config: SubmitConfig, *, api_client: k8s.ApiClient | None = None) -> None:
        self.config = config
        self._api_client = api_client

    # --- the client ---------------------------------------------------------------------------

    def _client(self) -> k8s.ApiClient:
        if self._api_client is None:
            self._api_client = _api_client(self.config)
        return self._api_client

    def _do(self, what: str, call: Any, *args: Any, **kw: Any) -> Any:
        """One API call; SubmitterUnavailable when the API server cannot be reached or answers
        5xx/429, ApiException (4xx) passed on to the caller."""
        try:
            return call(*args, _request_timeout=self.config.slurm_command_timeout_s, **kw)
        except ApiException as e:
            if e.status is None or e.status >= 500 or e.status == 429:
                raise self._unavailable(f"{what}: API server answered {e.status} {e.reason}") from e
            raise
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise self._unavailable(f"{what}: {type(e).__name__}: {e}") from e

    def _unavailable(self, message: str) -> SubmitterUnavailable:
        return SubmitterUnavailable(
            f"kubernetes {message}", retry_after_s=self.config.retry_after_s
        )

    # --- the protocol -------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> str:
        namespace = spec.options.get("namespace", self.config.kubernetes_namespace)
        env = {**spec.env, **self.config.extra_env}
        job, maps = prepare(
            parse_documents(spec.script),
            namespace=namespace,
            env=env,
            labels={JOB_LABEL: spec.name},
        )
        for cm in maps:
            cm["metadata"]["labels"][OWNER_LABEL] = job["metadata"]["name"]
        core = k8s.CoreV1Api(self._client())
        custom = k8s.CustomObjectsApi(self._client())
        try:
            for cm in maps:
                self._do("create ConfigMap", core.create_namespaced_config_map, namespace, cm)
            self._do(
                "create PyTorchJob",
                custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                job,
            )
        except ApiException as e:
            raise SubmissionRejected(f"the API server refused the job: {_api_message(e)}") from e
        return f"{namespace}/{job['metadata']['name']}"

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        by_namespace: dict[str, list[str]] = defaultdict(list)
        for job_id in dict.fromkeys(job_ids):
            namespace, name = _split(job_id)
            by_namespace[namespace].append(name)
        custom = k8s.CustomObjectsApi(self._client())
        found: dict[str, JobStatus] = {}
        for namespace, names in by_namespace.items():
            try:
                listed = self._do(
                    "list PyTorchJobs",
                    custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    label_selector=f"{MANAGED_BY}={MANAGER}",
                )
            except ApiException as e:
                raise self._unavailable(f"list PyTorchJobs: {_api_message(e)}") from e
            items = {i["metadata"]["name"]: i for i in listed.get("items", [])}
            for name in names:
                job = items.get(name)
                job_id = f"{namespace}/{name}"
                found[job_id] = self._job_status(namespace, job) if job else _gone(job_id)
        return found

    def _job_status(self, namespace: str, job: dict[str, Any]) -> JobStatus:
        status = job.get("status") or {}
        state, reason, at = _from_conditions(status.get("conditions") or [])
        if job["metadata"].get("deletionTimestamp"):
            state, reason = "CANCELLED", "PyTorchJob is being deleted"
        final = state in ("COMPLETED", "FAILED", "CANCELLED")
        exit_code = self._master_exit_code(namespace, job["metadata"]["name"]) if final else None
        if state == "COMPLETED" and exit_code is None:
            exit_code = 0
        return JobStatus(
            state=state,
            exit_code=exit_code,
            reason=reason,
            started_at=_time(status.get("startTime")),
            finished_at=(_time(status.get("completionTime")) or at) if final else None,
            scheduler_state=_latest_type(status.get("conditions") or []),
        )

    def _master_pod(self, namespace: str, name: str) -> Any | None:
        core = k8s.CoreV1Api(self._client())
        selector = f"{OPERATOR_JOB_NAME}={name},{OPERATOR_REPLICA_TYPE}=master"
        try:
            pods = self._do(
                "list pods", core.list_namespaced_pod, namespace, label_selector=selector
            )
        except ApiException:
            return None
        return pods.items[0] if pods.items else None

    def _master_exit_code(self, namespace: str, name: str) -> int | None:
        pod = self._master_pod(namespace, name)
        if pod is None or pod.status is None:
            return None
        for cs in pod.status.container_statuses or []:
            if cs.name != CONTAINER:
                continue
            for st in (cs.state, cs.last_state):
                if st is not None and st.terminated is not None:
                    return int(st.terminated.exit_code)
        return None

    def cancel(self, job_id: str) -> None:
        namespace, name = _split(job_id)
        custom = k8s.CustomObjectsApi(self._client())
        core = k8s.CoreV1Api(self._client())
        try:
            self._do(
                "delete PyTorchJob",
                custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body=k8s.V1DeleteOptions(propagation_policy="Foreground"),
            )
        except ApiException as e:
            if e.status == 404:
                return  # already gone: status() reads CANCELLED
            raise SubmissionRejected(f"cannot delete {job_id}: {_api_message(e)}") from e
        with contextlib.suppress(ApiException):  # the job is gone; a leftover ConfigMap is harmless
            self._do(
                "delete ConfigMaps",
                core.delete_collection_namespaced_config_map,
                namespace,
                label_selector=f"{OWNER_LABEL}={name},{MANAGED_BY}={MANAGER}",
            )

    def log_tail(self, job_id: str, lines: int = 50) -> str:
        namespace, name = _split(job_id)
        pod = self._master_pod(namespace, name)
        if pod is None:
            return ""
        core = k8s.CoreV1Api(self._client())
        try:
            text = self._do(
                "read log",
                core.read_namespaced_pod_log,
                pod.metadata.name,
                namespace,
                container=CONTAINER,
                tail_lines=lines,
            )
        except ApiException:
            return ""  # container not started yet, or the pod is gone
        return str(text)


def _api_client(config: SubmitConfig) -> k8s.ApiClient:
    try:
        if config.kubernetes_host is not None:
            c = k8s.Configuration(host=config.kubernetes_host)
            if config.kubernetes_token:
                c.api_key = {"authorization": config.kubernetes_token}
                c.api_key_prefix = {"authorization": "Bearer"}
            c.verify_ssl = config.kubernetes_verify_ssl
            c.retries = 0
            return k8s.ApiClient(c)
        if config.kubernetes_kubeconfig is not None:
            loaded: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=config.kubernetes_kubeconfig, context=config.kubernetes_context
            )
            return loaded
        c = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=c)  # type: ignore[no-untyped-call]
        return k8s.ApiClient(c)
    except (ConfigException, OSError) as e:
        raise SubmitterUnavailable(
            f"kubernetes client configuration: {e}", retry_after_s=config.retry_after_s
        ) from e


_CONDITION_STATES: dict[str, JobState] = {
    "Succeeded": "COMPLETED",
    "Failed": "FAILED",
    "Running": "RUNNING",
    "Restarting": "RUNNING",
    "Suspended": "PENDING",
    "Created": "PENDING",
}


def _from_conditions(
    conditions: list[dict[str, Any]],
) -> tuple[JobState, str | None, datetime | None]:
    """The state of the most decisive True condition (Succeeded, Failed over Running...), its
    reason and message, and when it became true."""
    true = {c.get("type"): c for c in conditions if c.get("status") == "True"}
    for kind in ("Succeeded", "Failed", "Running", "Restarting", "Suspended", "Created"):
        c = true.get(kind)
        if c is not None:
            words = ": ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
            plain = kind in ("Succeeded", "Running", "Created")
            return (
                _CONDITION_STATES[kind],
                None if plain else words or kind,
                _time(c.get("lastTransitionTime")),
            )
    return "PENDING", None, None


def _latest_type(conditions: list[dict[str, Any]]) -> str | None:
    true = [c for c in conditions if c.get("status") == "True"]
    return str(true[-1].get("type")) if true else None


def _gone(job_id: str) -> JobStatus:
    return JobStatus(
        state="CANCELLED",
        reason=f"PyTorchJob {job_id} no longer exists in the cluster (deleted)",
        scheduler_state=None,
    )


def _split(job_id: str) -> tuple[str, str]:
    namespace, sep, name = job_id.partition("/")
    if not sep or not namespace or not name:
        raise ValueError(f"not a Kubernetes job id (namespace/name): {job_id!r}")
    return namespace, name


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _api_message(e: ApiException) -> str:
    """The API server's Status message when it sent one, else the HTTP status and reason."""
    try:
        body = json.loads(e.body or "")
        if isinstance(body, dict) and body.get("message"):
            return f"{e.status} {body.get('reason', '')}: {body['message']}".strip()
    except ValueError:
        pass
    return f"{e.status} {e.reason}"
