"""PyTorchJob manifests: parse the submitted text, check the fields the training-operator requires,
and add what the submitter needs (namespace, labels, environment).

The checks follow the Kubeflow training-operator's PyTorchJob (kubeflow.org/v1) API and its
validation (pkg/apis/kubeflow.org/v1 pytorch_types.go, pytorch_validation.go): replica types
Master and Worker only, exactly one Master, a container named `pytorch` with an image in every
replica template, restartPolicy one of Always, OnFailure, Never, ExitCode; the object name a
DNS-1123 label (it names the pods and the master Service).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import yaml

from api.submit.protocol import SubmissionRejected

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
CONTAINER = "pytorch"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "meshplan"
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def parse_documents(text: str) -> list[dict[str, Any]]:
    """The YAML (or JSON) documents of a manifest text, empty documents dropped."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise SubmissionRejected(f"the manifest is not valid YAML: {e}") from e
    if not all(isinstance(d, dict) for d in docs):
        raise SubmissionRejected("every manifest document must be a mapping")
    return docs


def pytorchjob_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every way `doc` falls short of a PyTorchJob the operator accepts; empty when it is one."""
    problems: list[str] = []
    if doc.get("apiVersion") != f"{GROUP}/{VERSION}":
        problems.append(f"apiVersion must be {GROUP}/{VERSION}, got {doc.get('apiVersion')!r}")
    if doc.get("kind") != KIND:
        problems.append(f"kind must be {KIND}, got {doc.get('kind')!r}")
    name = (doc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or len(name) > 63 or not _DNS1123_LABEL.fullmatch(name):
        problems.append(f"metadata.name must be a DNS-1123 label of <= 63 characters, got {name!r}")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec is missing"]
    if "nprocPerNode" in spec and not isinstance(spec["nprocPerNode"], str):
        problems.append(f"spec.nprocPerNode must be a string, got {spec['nprocPerNode']!r}")
    replicas = spec.get("pytorchReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        return [*problems, "spec.pytorchReplicaSpecs is missing"]
    for kind in replicas:
        if kind not in ("Master", "Worker"):
            problems.append(f"spec.pytorchReplicaSpecs.{kind}: only Master and Worker exist")
    if "Master" not in replicas:
        problems.append("spec.pytorchReplicaSpecs.Master is missing")
    for kind, rs in replicas.items():
        problems += _replica_problems(f"spec.pytorchReplicaSpecs.{kind}", kind, rs)
    return problems


def _replica_problems(where: str, kind: str, rs: Any) -> list[str]:
    if not isinstance(rs, dict):
        return [f"{where} must be a mapping"]
    problems: list[str] = []
    n = rs.get("replicas")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        problems.append(f"{where}.replicas must be an integer >= 1, got {n!r}")
    elif kind == "Master" and n != 1:
        problems.append(f"{where}.replicas must be 1 (one master), got {n}")
    if rs.get("restartPolicy") not in RESTART_POLICIES:
        problems.append(
            f"{where}.restartPolicy must be one of {', '.join(RESTART_POLICIES)}, "
            f"got {rs.get('restartPolicy')!r}"
        )
    containers = ((rs.get("template") or {}).get("spec") or {}).get("containers")
    if not isinstance(containers, list):
        return [*problems, f"{where}.template.spec.containers is missing"]
    named = [c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER]
    if not named:
        problems.append(f"{where}.template.spec.containers has no container named {CONTAINER!r}")
    elif not named[0].get("image"):
        problems.append(f"{where}.template.spec.containers[{CONTAINER}].image is missing")
    return problems


def prepare(
    docs: list[dict[str, Any]], *, namespace: str, env: Mapping[str, str], labels: Mapping[str, str]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one PyTorchJob among `docs` (validated) and the ConfigMaps beside it, copied, in
    `namespace`, labelled, with `env` added to every `pytorch` container (replacing same names).
    Anything else in the manifest is refused."""
    jobs = [d for d in docs if d.get("kind") == KIND]
    maps = [d for d in docs if d.get("kind") == "ConfigMap" and d.get("apiVersion") == "v1"]
    others = [f"{d.get('apiVersion')}/{d.get('kind')}" for d in docs if d not in jobs + maps]
    if len(jobs) != 1 or others:
        raise SubmissionRejected(
            f"the manifest must hold one {KIND} (and optionally v1 ConfigMaps); "
            f"found {len(jobs)} {KIND} and {others or 'nothing else'}"
        )
    problems = pytorchjob_problems(jobs[0])
    if problems:
        raise SubmissionRejected(f"not a valid {KIND}: " + "; ".join(problems))
    job = copy.deepcopy(jobs[0])
    maps = copy.deepcopy(maps)
    for obj in (job, *maps):
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["labels"] = {**(meta.get("labels") or {}), **labels, MANAGED_BY: MANAGER}
    for rs in job["spec"]["pytorchReplicaSpecs"].values():
        for c in rs["template"]["spec"]["containers"]:
            if c.get("name") == CONTAINER and env:
                kept = [e for e in c.get("env") or [] if e.get("name") not in env]
                c["env"] = kept + [{"name": k, "value": v} for k, v in env.items()]
    return job, maps
