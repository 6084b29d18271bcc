"""Kubernetes target: a Kubeflow PyTorchJob (training-operator, kubeflow.org/v1) and a Kubeflow
Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1), plus a ConfigMap with the config files.

PyTorchJob: one Master and nodes-1 Workers, the container named `pytorch` (the operator injects
MASTER_ADDR, MASTER_PORT = the port named `pytorchjob-port`, PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK into it), `nprocPerNode` a string. The torchrun command states nnodes and
nproc-per-node itself and meets at `$(MASTER_ADDR):port` (c10d); with `elastic`, an
`elasticPolicy` makes the operator set PET_RDZV_* and the command leaves rendezvous to it.
TrainJob: `runtimeRef` torch-distributed, `trainer.numNodes`, `numProcPerNode`,
`resourcesPerNode`; the runtime sets the PET_* variables torchrun reads.
"""

from __future__ import annotations

from typing import Any

import yaml

from planner.launch.common import Layout, environment, layout, rdzv_id, torchrun_options, workdir
from planner.launch.deployment import Deployment, LaunchBundle, LaunchFile
from planner.launch.trainer import Trainer
from planner.plan import Plan

PYTORCHJOB_FILE = "pytorchjob.yaml"
TRAINJOB_FILE = "trainjob.yaml"
CONFIG_MOUNT = "/etc/meshplan"
GPU = "nvidia.com/gpu"


def render_kubernetes(plan: Plan, dep: Deployment, trainer: Trainer, header: str) -> LaunchBundle:
    lay = layout(plan, dep)
    if not dep.image:
        image = "nvcr.io/nvidia/pytorch:25.01-py3"
        notes = [f"no image given; the manifests use {image}"]
    else:
        image, notes = dep.image, []
    env = [{"name": k, "value": v} for k, v in environment(dep, trainer)]
    config_map = _config_map(dep, trainer) if trainer.files else None
    pytorchjob = _pytorchjob(plan, dep, trainer, lay, image, env, config_map is not None)
    trainjob = _trainjob(dep, trainer, lay, image, env, config_map is not None)
    comment = "".join(f"{line}\n" for line in header.splitlines())
    docs_pt = [d for d in (config_map, pytorchjob) if d is not None]
    docs_tj = [d for d in (config_map, trainjob) if d is not None]
    files = (
        LaunchFile(name=PYTORCHJOB_FILE, content=comment + _dump_all(docs_pt)),
        LaunchFile(name=TRAINJOB_FILE, content=comment + _dump_all(docs_tj)),
        *trainer.files,
    )
    notes += list(trainer.notes)
    notes.append(
        f"PyTorchJob needs the Kubeflow training-operator; TrainJob needs Kubeflow Trainer v2 "
        f"with the torch-distributed runtime. Apply one: kubectl apply -f {PYTORCHJOB_FILE}"
    )
    if config_map is not None:
        notes.append(
            f"the TrainJob mounts ConfigMap {dep.job_name}-config at {CONFIG_MOUNT} with "
            f"spec.podTemplateOverrides (Kubeflow Trainer v2.1; v2.0 calls it podSpecOverrides, "
            f"later releases runtimePatches)"
        )
    commands = (f"kubectl apply -f {PYTORCHJOB_FILE}",)
    return LaunchBundle(files=files, commands=commands, notes=tuple(notes))


def _config_map(dep: Deployment, trainer: Trainer) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{dep.job_name}-config", "namespace": dep.namespace},
        "data": {f.name: f.content for f in trainer.files},
    }


def _pytorchjob(
    plan: Plan,
    dep: Deployment,
    trainer: Trainer,
    lay: Layout,
    image: str,
    env: list[dict[str, str]],
    mount: bool,
) -> dict[str, Any]:
    if dep.elastic:
        opts = ["--nproc-per-node", str(lay.gpus_per_node)]
    else:
        opts = torchrun_options(
            nnodes=str(lay.nodes),
            nproc_per_node=str(lay.gpus_per_node),
            endpoint=f"$(MASTER_ADDR):{dep.port}",
            rdzv_id=rdzv_id(plan, dep),
            max_restarts=dep.max_restarts,
        )
    container: dict[str, Any] = {
        "name": "pytorch",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": workdir(dep, container=True),
        "command": ["torchrun", *opts, *trainer.argv],
        "env": env,
        "ports": [{"name": "pytorchjob-port", "containerPort": dep.port}],
        "resources": {"limits": {GPU: lay.gpus_per_node}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if mount:
        container["volumeMounts"].append(
            {"name": "meshplan-config", "mountPath": CONFIG_MOUNT, "readOnly": True}
        )
        volumes.append({"name": "meshplan-config", "configMap": {"name": f"{dep.job_name}-config"}})

    def replica(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container], "volumes": volumes}},
        }

    specs = {"Master": replica(1)}
    if lay.nodes > 1:
        specs["Worker"] = replica(lay.nodes - 1)
    spec: dict[str, Any] = {"nprocPerNode": str(lay.gpus_per_node)}
    if dep.elastic:
        spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "rdzvPort": dep.port,
            "minReplicas": lay.nodes,
            "maxReplicas": lay.nodes,
            "maxRestarts": dep.max_restarts,
        }
    spec["runPolicy"] = {"cleanPodPolicy": "None"}
    spec["pytorchReplicaSpecs"] = specs
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": dep.job_name, "namespace": dep.namespace},
        "spec": spec,
    }


def _trainjob(
    dep: Deployment,
    trainer: Trainer,
    lay: Layout,
    image: str,
    env: list[dict[str, str]],
    mount: bool,
) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": dep.job_name, "namespace": dep.namespace},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "image": image,
                "command": ["torchrun", *trainer.argv],
                "env": env,
                "numNodes": lay.nodes,
                "numProcPerNode": lay.gpus_per_node,
                "resourcesPerNode": {"limits": {GPU: lay.gpus_per_node}},
            },
        },
    }
    if mount:  # the torch-distributed runtime's trainer job and container are both "node"
        job["spec"]["podTemplateOverrides"] = [
            {
                "targetJobs": [{"name": "node"}],
                "spec": {
                    "volumes": [
                        {"name": "meshplan-config", "configMap": {"name": f"{dep.job_name}-config"}}
                    ],
                    "containers": [
                        {
                            "name": "node",
                            "volumeMounts": [
                                {
                                    "name": "meshplan-config",
                                    "mountPath": CONFIG_MOUNT,
                                    "readOnly": True,
                                }
                            ],
                        }
                    ],
                },
            }
        ]
    return job


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (config files) as literal blocks, and no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump_all(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
