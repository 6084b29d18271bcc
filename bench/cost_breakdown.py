"""Where the predicted step goes: bench/cost_breakdown.py REQUEST CANDIDATE [--json]

REQUEST is a plan request JSON, CANDIDATE a fixed candidate JSON (as `meshplan evaluate`).
The step is attributed on the *critical* pipeline rank (the one with the most busy time):

    step = busy(rank) + idle(rank) + post
    busy = m x sum over the rank's stages of (forward + backward) per micro-batch
         = GEMMs by kind + attention + element-wise (forward, backward, recompute)
           + TP, CP and EP exchanges (what the layer times hold beyond compute)
           + the runtime's per-action overhead
    idle = simulator makespan - busy: the pipeline bubble, including waits for p2p
    post = the largest per-rank DP gradient sync + optimizer step

so the rows sum to the predicted step time. Sent p2p time is shown apart (the simulator
overlaps it with compute: it is inside `idle` where it delays a dependent action). Per-kind
parts come from the analytic catalog (planner.catalog.models.analytic_work); a measured
profile has no parts, and its layers' compute shows as `layers (profile)`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.models import analytic_work, layer_refs
from planner.catalog.ring_attention import ring_attention_for
from planner.cost import build_inputs, prediction_from_score, score_partition
from planner.cost.partition import MODE_INDEX, SPLIT_BACKWARD
from planner.cost.score import stage_modes
from planner.cost.source import request_efficiency
from planner.specs import Candidate, ModelArch, PlanRequest


def breakdown(request: PlanRequest, candidate: Candidate) -> dict[str, Any]:
    """The step's attribution (module docstring) as a dict of seconds per row."""
    eff = request_efficiency(request)
    inputs, terms = build_inputs(request, candidate, efficiency=eff)
    c = terms.candidate
    assert c.stages is not None
    score = score_partition(inputs, c.stages)
    pred = prediction_from_score(request, inputs, terms, score)
    rank = max(range(c.pp), key=lambda r: score.sim.busy_s[r])
    m = inputs.num_microbatches
    arch = request.model if isinstance(request.model, ModelArch) else None
    work = None
    kinds = tuple(name.split(".")[0] for name in inputs.layer_names)  # embedding, decoder, head
    if arch is not None:
        kinds = tuple(ref.kind for ref in layer_refs(arch))  # and decoder_moe, decoder_sliding
        work = analytic_work(
            arch,
            gpu=request.cluster.device,
            dtype=request.training.dtype,
            seq_length=request.training.seq_length,
            micro_batch_size=c.micro_batch_size,
            tp=c.tp,
            sequence_parallel=c.sequence_parallel,
            cp=c.cp,
            ep=c.ep,
            etp=c.etp,
            efficiency=eff,
            ring=ring_attention_for(request.constraints.framework),
        )
    rows: dict[str, float] = defaultdict(float)
    split = c.schedule in SPLIT_BACKWARD
    of, ob, _ = inputs.stage_overhead_s
    for s, stage in enumerate(c.stages):
        if inputs.stage_rank[s] != rank:
            continue
        rows["runtime overhead per action"] += m * (of + ob)
        for layer, mode in zip(range(*stage.layers), stage_modes(stage), strict=True):
            cost = terms.costs[layer]
            bw_i, bw_w = cost.split_costs() if split else (cost.bw_input_s, cost.bw_weight_s)
            k = MODE_INDEX[mode]
            compute = cost.fw_s + bw_i + bw_w + cost.recompute_s.get(mode)
            total = inputs.fw_s[layer] + inputs.bw_input_s[layer][k] + inputs.bw_weight_s[layer]
            rows["TP, CP and EP exchanges"] += m * (total - compute)
            kind = kinds[layer]
            measured_split = split and (bw_i, bw_w) != (cost.bw_input_s, cost.bw_weight_s)
            if work is None or measured_split:
                rows["layers (profile)"] += m * compute
                continue
            for part in work[kind].parts:
                rerun = mode == "full" or (mode == "selective" and part.selective)
                again = part.fw_s if rerun else 0.0
                rows[part.kind] += m * (part.fw_s + part.bw_input_s + part.bw_weight_s + again)
    busy = score.sim.busy_s[rank]
    post = score.post_s
    rows["bubble and waits"] = score.pipeline_s - busy
    rows["DP gradient sync"] = pred.dp_sync_s
    rows["optimizer step"] = post - pred.dp_sync_s
    p2p = sum(
        2 * m * score.stage_p2p_s[s]
        for s in range(c.num_stages - 1)
        if inputs.stage_rank[s] == rank and inputs.stage_rank[s + 1] != rank
    )
    return {
        "step_time_s": pred.step_time_s,
        "critical_rank": rank,
        "num_microbatches": m,
        "rows_s": dict(rows),
        "sum_of_rows_s": sum(rows.values()),
        "p2p_sent_s": p2p,
        "bubble_fraction": pred.bubble_fraction,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("request", help="plan request JSON")
    parser.add_argument("candidate", help="candidate JSON")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    request = PlanRequest.model_validate_json(Path(args.request).read_text())
    candidate = Candidate.model_validate_json(Path(args.candidate).read_text())
    out = breakdown(request, candidate)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    step = out["step_time_s"]
    print(
        f"step {step:.4g} s on critical rank {out['critical_rank']} "
        f"(m = {out['num_microbatches']}, bubble {out['bubble_fraction']:.1%})"
    )
    for name, value in sorted(out["rows_s"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:<28} {value:10.4g} s  {value / step:6.1%}")
    print(f"  {'(sum)':<28} {out['sum_of_rows_s']:10.4g} s")
    print(f"  p2p sent (overlapped)        {out['p2p_sent_s']:10.4g} s")


if __name__ == "__main__":
    main()
