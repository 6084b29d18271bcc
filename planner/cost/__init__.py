"""The cost model: step time, throughput, bubble and per-GPU memory of a candidate.

Public surface (used by search, the service and the CLI):
- `resolve_costs(request) -> CostSource`: per-layer costs at any (mbs, tp, sp).
- `check_candidate(request, candidate) -> Candidate`: validate in context, fill balanced stages.
- `partition_inputs(request, candidate) -> PartitionInputs`: per-layer numbers for the search.
- `score_partition(inputs, stages) -> PartitionScore`: step time, bubble and per-rank memory of
  one partition -- the one implementation `evaluate` and the search share.
- `evaluate(request, candidate) -> Prediction`: the simulator-based prediction.
Formulas and sources: docs/cost-model.md.
"""

from planner.cost.candidate import balanced_bounds, check_candidate
from planner.cost.evaluate import evaluate, prediction_from_score
from planner.cost.fixed import fixed_plan
from planner.cost.inputs import LayerTerms, build_inputs, partition_inputs
from planner.cost.partition import MODE_INDEX, ModeTriple, PartitionInputs
from planner.cost.score import PartitionScore, score_partition, score_split
from planner.cost.source import CostSource, resolve_costs

__all__ = [
    "MODE_INDEX",
    "CostSource",
    "LayerTerms",
    "ModeTriple",
    "PartitionInputs",
    "PartitionScore",
    "balanced_bounds",
    "build_inputs",
    "check_candidate",
    "evaluate",
    "fixed_plan",
    "partition_inputs",
    "prediction_from_score",
    "resolve_costs",
    "score_partition",
    "score_split",
]
