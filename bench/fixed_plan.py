"""A Plan for a fixed candidate (tests, benchmarks): the cost model's prediction, no search.

`fixed_plan(request, candidate)` fills the candidate's stages (`planner.cost.check_candidate`)
and predicts it (`planner.cost.evaluate`), giving the same Plan document the search returns
for that configuration.
"""

from __future__ import annotations

import hashlib

from planner.cost import check_candidate, evaluate, resolve_costs
from planner.plan import Plan
from planner.specs.request import Candidate, PlanRequest

__all__ = ["fixed_plan"]


def fixed_plan(request: PlanRequest, candidate: Candidate) -> Plan:
    source = resolve_costs(request)
    c = check_candidate(request, candidate, source=source)
    assert c.stages is not None
    prediction = evaluate(request, c, source=source)
    b = request.training.global_batch_size
    return Plan(
        model_name=request.model_name,
        model_hash=_model_hash(request),
        arch=request.arch,
        gpu=request.cluster.gpu,
        num_gpus=request.cluster.num_gpus,
        tp=c.tp,
        pp=c.pp,
        dp=c.dp,
        vpp=c.vpp,
        schedule=c.schedule,
        micro_batch_size=c.micro_batch_size,
        num_microbatches=b // (c.dp * c.micro_batch_size),
        global_batch_size=b,
        seq_length=request.training.seq_length,
        zero_stage=c.zero_stage,
        sequence_parallel=c.sequence_parallel,
        recompute=c.recompute,
        stages=c.stages,
        prediction=prediction,
        why=("fixed candidate, evaluated by the cost model (no search)",),
    )


def _model_hash(request: PlanRequest) -> str:
    if request.profile is not None:
        return request.profile.model_hash
    arch = request.arch
    raw = arch.model_dump_json().encode() if arch is not None else request.model_name.encode()
    return hashlib.sha256(raw).hexdigest()[:16]
