"""The cost model: step time, throughput, bubble and per-GPU memory of a candidate.

Public surface (used by search, the service and the CLI):
- `resolve_costs(request) -> CostSource`: per-layer costs at any (mbs, tp, sp).
- `check_candidate(request, candidate) -> Candidate`: validate in context, fill balanced stages.
- `partition_inputs(request, candidate) -> PartitionInputs`: per-layer numbers for the search.
- `evaluate(request, candidate) -> Prediction`: the simulator-based prediction.
"""
