"""A deployment's nodes against the cluster a plan was made for.

The plan's tensor-parallel groups, their placement within a node and the communication it
predicts assume the cluster's GPUs per node: a launch on another node shape (e.g. 1,024 GPUs
as 2 nodes of 512) runs something the plan did not predict, so it is refused with both shapes.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from planner.errors import SpecError
from planner.launch import Deployment
from planner.plan import Plan
from planner.specs.cluster import ClusterSpec


def fit_cluster(plan: Plan, dep: Deployment, *, gpus_per_node: int | None = None) -> Deployment:
    """`dep` with the plan's GPUs per node filled in when it names no layout; SpecError
    (field `deployment.nodes`, `.hosts` or `.gpus_per_node`) when it names another one.

    `gpus_per_node` stands in for `plan.gpus_per_node` in plans stored before it was recorded
    (from the stored request's cluster); with neither, `dep` is returned as it is.
    """
    g = plan.gpus_per_node or gpus_per_node
    if g is None:
        return dep
    n = plan.num_gpus
    per_node = min(n, g)  # a plan smaller than a node runs on one node
    nodes = n // per_node
    shape = f"the plan was made for {nodes} node(s) x {per_node} GPUs ({n} GPUs)"
    if dep.nodes is not None and dep.nodes != nodes:
        raise SpecError(
            "deployment.nodes",
            dep.nodes,
            f"{shape}; {dep.nodes} nodes would need {n / dep.nodes:g} GPUs per node",
        )
    if dep.hosts and len(dep.hosts) != nodes:
        raise SpecError("deployment.hosts", list(dep.hosts), f"{len(dep.hosts)} hosts, but {shape}")
    if dep.gpus_per_node is not None and dep.gpus_per_node != per_node:
        raise SpecError(
            "deployment.gpus_per_node",
            dep.gpus_per_node,
            f"{shape}; {dep.gpus_per_node} GPUs per node would need "
            f"{n / dep.gpus_per_node:g} nodes",
        )
    if dep.nodes is None and dep.gpus_per_node is None and not dep.hosts:
        return dep.model_copy(update={"gpus_per_node": per_node})
    return dep


def stored_gpus_per_node(request: Any) -> int | None:
    """The cluster's GPUs per node in a stored request document, None if it has none."""
    if not isinstance(request, dict):
        return None
    try:
        return ClusterSpec.model_validate(request.get("cluster")).gpus_per_node
    except ValidationError:
        return None
