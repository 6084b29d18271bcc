"""Size limits the service puts on requests, so that no request can make a search or a
simulation run unbounded (the body limit bounds bytes; these bound work)."""

from __future__ import annotations

from api.problems import ProblemError
from planner.specs import Candidate, PlanRequest

MAX_GPUS = 65_536
MAX_LAYERS = 4_096
MAX_GLOBAL_BATCH = 1 << 20
MAX_SEQ_LENGTH = 1 << 21
MAX_SCHEDULE_ACTIONS = 200_000  # micro-batches x stages simulated for one candidate


def _too_big(field: str, value: int, limit: int) -> ProblemError:
    return ProblemError(
        422,
        "Request too large to plan",
        f"{field}={value} exceeds the service limit {limit}",
        kind="validation",
        errors=[{"field": f"body.{field}", "message": f"at most {limit}", "value": value}],
    )


def check_request(request: PlanRequest, *, prefix: str = "") -> None:
    checks = [
        ("cluster.num_gpus", request.cluster.num_gpus, MAX_GPUS),
        ("training.global_batch_size", request.training.global_batch_size, MAX_GLOBAL_BATCH),
        ("training.seq_length", request.training.seq_length, MAX_SEQ_LENGTH),
    ]
    arch = request.arch
    if arch is not None:
        checks.append(("model.num_layers", arch.num_layers, MAX_LAYERS))
    profile = request.profile
    if profile is not None:
        checks.append(("model.profile.layers", len(profile.layers), MAX_LAYERS))
    for field, value, limit in checks:
        if value > limit:
            raise _too_big(prefix + field, value, limit)


def check_candidate_size(request: PlanRequest, candidate: Candidate, *, prefix: str = "") -> None:
    per = candidate.dp * candidate.micro_batch_size
    m = max(1, request.training.global_batch_size // per)
    actions = m * candidate.pp * candidate.vpp
    if actions > MAX_SCHEDULE_ACTIONS:
        raise _too_big(prefix + "candidate (micro-batches x stages)", actions, MAX_SCHEDULE_ACTIONS)
