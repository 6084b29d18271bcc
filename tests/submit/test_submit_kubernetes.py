"""KubernetesSubmitter through the official `kubernetes` client against a local HTTP server that
answers like the API server (kube_apiserver.py): no Kubernetes cluster runs here, so this tests
the client boundary, not a training-operator. Manifests are checked against the fields the
operator requires, including every one `planner.launch` renders."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kube_apiserver import ApiState, api_server

from api.submit import (
    JobSpec,
    SubmissionRejected,
    SubmitConfig,
    SubmitterUnavailable,
    make_submitter,
)
from api.submit.kubernetes import KubernetesSubmitter
from api.submit.kubernetes_manifest import pytorchjob_problems
from planner.launch import FRAMEWORKS, Deployment, render
from tests.planner.launch.launch_plans import make_plan

# 8 GPUs each: ZeRO-1 for meshplan and megatron, ZeRO-3 (FSDP) for torchtitan and deepspeed
PLAN = make_plan(tp=2, dp=4, zero=1, gbs=16)
FSDP_PLAN = make_plan(tp=2, dp=4, zero=3, gbs=16)


def rendered(nodes: int, *, framework: str = "meshplan", elastic: bool = False) -> str:
    dep = Deployment(nodes=nodes, image="repo/img:1", job_name="gpt-run", elastic=elastic)
    plan = FSDP_PLAN if framework in ("torchtitan", "deepspeed") else PLAN
    bundle = render(plan, dep, target="kubernetes", framework=framework)  # type: ignore[arg-type]
    return bundle.file("pytorchjob.yaml").content


@pytest.fixture
def kube() -> Iterator[tuple[KubernetesSubmitter, ApiState]]:
    with api_server() as (url, state):
        config = SubmitConfig(
            kubernetes_host=url, kubernetes_token="t0k3n", kubernetes_namespace="ml"
        )
        submitter = make_submitter("kubernetes", config)
        assert isinstance(submitter, KubernetesSubmitter)
        yield submitter, state


def job_doc(**replicas: Any) -> dict[str, Any]:
    def rs(n: Any, policy: Any = "OnFailure", name: str = "pytorch") -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": policy,
                "template": {"spec": {"containers": [{"name": name, "image": "img"}]}}}  # fmt: skip

    specs = {k: rs(*v) for k, v in (replicas or {"Master": (1,)}).items()}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j-1"},
            "spec": {"pytorchReplicaSpecs": specs}}  # fmt: skip


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("nodes", "elastic"), [(1, False), (2, False), (4, True)])
def test_every_rendered_pytorchjob_is_one_the_operator_accepts(
    framework: str, nodes: int, elastic: bool
) -> None:
    docs = [d for d in yaml.safe_load_all(rendered(nodes, framework=framework, elastic=elastic))]
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert pytorchjob_problems(job) == []
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {}).get("replicas", 0) == nodes - 1


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({**job_doc(), "apiVersion": "kubeflow.org/v2"}, "apiVersion must be kubeflow.org/v1"),
        ({**job_doc(), "kind": "TFJob"}, "kind must be PyTorchJob"),
        ({**job_doc(), "metadata": {"name": "Big_Name"}}, "metadata.name must be a DNS-1123"),
        ({**job_doc(), "metadata": {"name": "a" * 64}}, "<= 63 characters"),
        (job_doc(Master=(2,)), "Master.replicas must be 1"),
        (job_doc(Master=(1,), Worker=(0,)), "Worker.replicas must be an integer >= 1, got 0"),
        (job_doc(Master=(1, "Sometimes")), "restartPolicy must be one of Always"),
        (job_doc(Master=(1, "Never", "trainer")), "no container named 'pytorch'"),
        (job_doc(Worker=(2,)), "Master is missing"),
        (job_doc(Master=(1,), Launcher=(1,)), "Launcher: only Master and Worker exist"),
        ({**job_doc(), "spec": {}}, "spec.pytorchReplicaSpecs is missing"),
    ],
)
def test_manifest_checks_name_what_the_operator_would_refuse(
    doc: dict[str, Any], problem: str
) -> None:
    problems = pytorchjob_problems(doc)
    assert any(problem in p for p in problems), problems


def test_submit_creates_the_configmap_and_the_labelled_pytorchjob(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    manifest = rendered(2)  # meshplan's bundle carries plan.json in a ConfigMap
    job_id = submitter.submit(JobSpec(name="sub-1", script=manifest, env={"MESHPLAN_REPORT": "x"}))
    assert job_id == "ml/gpt-run"
    job = state.jobs[("ml", "gpt-run")]
    assert pytorchjob_problems(job) == []
    assert job["metadata"]["labels"]["meshplan.io/job"] == "sub-1"
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        (container,) = rs["template"]["spec"]["containers"]
        assert {"name": "MESHPLAN_REPORT", "value": "x"} in container["env"]
    assert [k for k in state.configmaps] == [("ml", "gpt-run-config")]
    with pytest.raises(SubmissionRejected, match="409 AlreadyExists"):
        submitter.submit(JobSpec(name="sub-1", script=manifest))


def test_submit_refuses_a_manifest_that_is_not_one_valid_pytorchjob(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    with pytest.raises(SubmissionRejected, match=r"Master\.replicas must be 1"):
        submitter.submit(JobSpec(name="x", script=yaml.safe_dump(job_doc(Master=(3,)))))
    trainjob = render(PLAN, Deployment(nodes=2), target="kubernetes", framework="meshplan")
    with pytest.raises(SubmissionRejected, match="must hold one PyTorchJob"):
        submitter.submit(JobSpec(name="x", script=trainjob.file("trainjob.yaml").content))
    assert state.jobs == {}


def _operator_sets(state: ApiState, name: str, *conditions: tuple[str, str], **status: Any) -> None:
    state.jobs[("ml", name)]["status"] = {
        **status,
        "conditions": [
            {"type": t, "status": "True" if t == conditions[-1][0] else "False", "reason": r,
             "message": f"PyTorchJob {name} is {t.lower()}.",
             "lastTransitionTime": "2026-12-01T10:00:05Z"}
            for t, r in conditions
        ],
    }  # fmt: skip


def _master_pod(state: ApiState, job: str, exit_code: int | None, log: str = "") -> None:
    terminated = (
        {"terminated": {"exitCode": exit_code, "reason": "Error"}}
        if exit_code is not None
        else {"running": {}}
    )
    state.pods[("ml", f"{job}-master-0")] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job}-master-0", "namespace": "ml",
                     "labels": {"training.kubeflow.org/job-name": job,
                                "training.kubeflow.org/replica-type": "master"}},
        "status": {"containerStatuses": [{"name": "pytorch", "state": terminated, "ready": False,
                                          "restartCount": 0, "image": "img", "imageID": ""}]},
    }  # fmt: skip
    state.logs[("ml", f"{job}-master-0")] = log


def test_status_follows_the_operators_conditions_in_one_list_call(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    ids = [
        submitter.submit(JobSpec(name=f"s{i}", script=yaml.safe_dump(_named(f"j-{i}"))))
        for i in range(4)
    ]
    _operator_sets(
        state,
        "j-1",
        ("Created", "PyTorchJobCreated"),
        ("Running", "PyTorchJobRunning"),
        startTime="2026-12-01T10:00:01Z",
    )
    _operator_sets(
        state,
        "j-2",
        ("Created", "PyTorchJobCreated"),
        ("Succeeded", "PyTorchJobSucceeded"),
        startTime="2026-12-01T10:00:01Z",
        completionTime="2026-12-01T10:09:00Z",
    )
    _operator_sets(state, "j-3", ("Created", "PyTorchJobCreated"), ("Failed", "PyTorchJobFailed"),
                   startTime="2026-12-01T10:00:01Z")  # fmt: skip
    _master_pod(state, "j-2", 0)
    _master_pod(state, "j-3", 3)
    state.requests.clear()
    statuses = submitter.status(ids)
    lists = [
        r for r in state.requests if r == ("GET", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs")
    ]
    assert len(lists) == 1
    pending, running, done, failed = (statuses[i] for i in ids)
    assert (pending.state, pending.started_at) == ("PENDING", None)
    assert running.state == "RUNNING" and running.started_at is not None
    assert running.started_at.isoformat() == "2026-12-01T10:00:01+00:00"
    assert (done.state, done.exit_code) == ("COMPLETED", 0)
    assert (
        done.finished_at is not None and done.finished_at.isoformat() == "2026-12-01T10:09:00+00:00"
    )
    assert (failed.state, failed.exit_code) == ("FAILED", 3)
    assert failed.reason == "PyTorchJobFailed: PyTorchJob j-3 is failed."


def _named(name: str) -> dict[str, Any]:
    doc = job_doc()
    doc["metadata"] = {"name": name}
    return doc


def test_cancel_deletes_the_job_and_status_then_reads_cancelled(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    job_id = submitter.submit(JobSpec(name="c", script=rendered(2)))
    submitter.cancel(job_id)
    assert state.jobs == {} and state.configmaps == {}
    status = submitter.status([job_id])[job_id]
    assert status.state == "CANCELLED"
    assert status.reason is not None and "no longer exists" in status.reason
    submitter.cancel(job_id)  # already gone: not an error


def test_log_tail_reads_the_master_pods_pytorch_container(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    job_id = submitter.submit(JobSpec(name="l", script=yaml.safe_dump(_named("logs"))))
    assert submitter.log_tail(job_id) == ""  # no pod yet
    _master_pod(state, "logs", None, log="".join(f"step {i}\n" for i in range(100)))
    assert submitter.log_tail(job_id, lines=2) == "step 98\nstep 99\n"


def test_api_server_errors_and_outages_are_unavailable(
    kube: tuple[KubernetesSubmitter, ApiState],
) -> None:
    submitter, state = kube
    job_id = submitter.submit(JobSpec(name="o", script=yaml.safe_dump(_named("out"))))
    state.fail_with = 503
    with pytest.raises(SubmitterUnavailable, match="503"):
        submitter.status([job_id])
    with pytest.raises(SubmitterUnavailable):
        submitter.submit(JobSpec(name="o2", script=yaml.safe_dump(_named("out-2"))))
    state.fail_with = None
    assert submitter.status([job_id])[job_id].state == "PENDING"


def test_unreachable_api_server_is_unavailable() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = SubmitConfig(kubernetes_host=f"http://127.0.0.1:{port}", retry_after_s=7)
    submitter = make_submitter("kubernetes", config)
    with pytest.raises(SubmitterUnavailable) as info:
        submitter.status(["ml/anything"])
    assert info.value.retry_after_s == 7
