"""Immutable, validated specs: model, cluster, training, constraints, the plan request, candidates.

Every spec is a frozen pydantic model that validates on construction; invalid values raise
`pydantic.ValidationError` whose entries carry the field path (`loc`), the value (`input`)
and a message with the numbers, or `planner.errors.SpecError` for checks that need context.
"""

from planner.specs.base import Frozen, ModeValues, RecomputeMode, ScheduleName
from planner.specs.cluster import ClusterSpec
from planner.specs.model import LayerCost, LayerRef, ModelArch, ModelProfile, ProfilePoint
from planner.specs.request import (
    Candidate,
    Constraints,
    PlanRequest,
    ProfileRef,
    SearchOptions,
    StageSpec,
)
from planner.specs.training import TrainingSpec

__all__ = [
    "Candidate",
    "ClusterSpec",
    "Constraints",
    "Frozen",
    "LayerCost",
    "LayerRef",
    "ModeValues",
    "ModelArch",
    "ModelProfile",
    "PlanRequest",
    "ProfilePoint",
    "ProfileRef",
    "RecomputeMode",
    "ScheduleName",
    "SearchOptions",
    "StageSpec",
    "TrainingSpec",
]
