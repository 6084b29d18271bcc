"""`evaluate(request, candidate) -> Prediction`: the simulator-based prediction of a candidate.

Step time = simulator makespan + the largest per-rank post time (DP sync + optimizer step),
both from `score_partition`. Throughput figures:
- model FLOPs per step = 3 x sum of the layers' forward FLOPs x tp x cp (the ranks that share
  a micro-batch) x (dp x m micro-batches):
  backward = 2 x forward, recompute not counted. For `gpt` this is Korthikanti et al. 2022,
  Eq. 7: 72*B*L*s*h^2*(1 + s/(6h) + V/(12hL)).
- hardware FLOPs add the recomputed forward work, per layer fw_flops x recompute_s / fw_s
  (all of the forward for `full`: Narayanan et al. 2021, Eq. 3, factor 96 instead of 72).
- MFU = model FLOP/s / (GPUs x peak FLOP/s) (PaLM, Chowdhery et al. 2022, Appendix B).
"""

from __future__ import annotations

from planner.catalog.efficiency import Efficiency
from planner.cost.inputs import LayerTerms, build_inputs
from planner.cost.partition import PartitionInputs
from planner.cost.score import PartitionScore, score_partition, stage_modes
from planner.cost.source import CostSource
from planner.plan import MemoryBreakdown, Prediction, RankPrediction, StagePrediction
from planner.specs.request import Candidate, PlanRequest


def evaluate(
    request: PlanRequest,
    candidate: Candidate,
    *,
    source: CostSource | None = None,
    efficiency: Efficiency | None = None,
) -> Prediction:
    """Predict step time, throughput, bubble and per-GPU memory of a fixed candidate.

    `efficiency` overrides the request's cost-model constants (its calibration, else the
    catalog defaults). Raises SpecError (naming the field) if the candidate does not fit the
    request.
    """
    inputs, terms = build_inputs(request, candidate, source=source, efficiency=efficiency)
    c = terms.candidate
    assert c.stages is not None  # filled by check_candidate
    score = score_partition(inputs, c.stages)
    return prediction_from_score(request, inputs, terms, score)


def _flops(terms: LayerTerms, c: Candidate, global_batch_size: int) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per optimizer step, whole job."""
    assert c.stages is not None
    micro_batches = global_batch_size // c.micro_batch_size  # dp * m
    fw = sum(cost.fw_flops for cost in terms.costs) * c.tp * c.cp  # a micro-batch's ranks
    extra = 0.0
    for stage in c.stages:
        modes = stage_modes(stage)
        for layer, mode in zip(range(*stage.layers), modes, strict=True):
            cost = terms.costs[layer]
            if cost.fw_s > 0:
                extra += cost.fw_flops * cost.recompute_s.get(mode) / cost.fw_s
    model = 3.0 * fw * micro_batches
    hardware = model + extra * c.tp * c.cp * micro_batches
    return model, hardware


def prediction_from_score(
    request: PlanRequest, inputs: PartitionInputs, terms: LayerTerms, score: PartitionScore
) -> Prediction:
    """Assemble the Prediction of a scored, checked candidate."""
    c = terms.candidate
    assert c.stages is not None
    n_gpus = request.cluster.num_gpus
    step = score.step_time_s
    model_flops, hw_flops = _flops(terms, c, request.training.global_batch_size)
    peak = request.cluster.device.peak_flops

    stages: list[StagePrediction] = []
    rank_stages: list[list[int]] = [[] for _ in range(c.pp)]
    params = [0.0] * c.pp
    grads = [0.0] * c.pp
    optim = [0.0] * c.pp
    dps = [0.0] * c.pp
    opts = [0.0] * c.pp
    for s, stage in enumerate(c.stages):
        rank = inputs.stage_rank[s]
        rank_stages[rank].append(s)
        modes = stage_modes(stage)
        for layer in range(*stage.layers):
            sb = terms.static[layer]
            params[rank] += sb.params_bytes
            grads[rank] += sb.grads_bytes
            optim[rank] += sb.optimizer_bytes
            dps[rank] += terms.dp_sync_s[layer]
            opts[rank] += terms.optimizer_s[layer]
        held = inputs.inflight[s] * score.stage_activation_bytes[s]
        stages.append(
            StagePrediction(
                stage=s,
                rank=rank,
                layers=stage.layers,
                recompute=tuple(modes),
                fw_s=score.stage_fw_s[s],
                bw_s=score.stage_bw_s[s],
                bw_weight_s=score.stage_w_s[s],
                p2p_s=score.stage_p2p_s[s],
                peak_inflight=inputs.inflight[s],
                activation_bytes=held,
            )
        )
    ranks = []
    for r in range(c.pp):
        mem = MemoryBreakdown(
            params_bytes=params[r],
            grads_bytes=grads[r],
            optimizer_bytes=optim[r],
            activations_bytes=score.rank_peaks[r].activations_bytes,
            buffers_bytes=terms.buffers_bytes,
            reserve_bytes=terms.reserve_bytes,
            transient_bytes=score.rank_peaks[r].transient_bytes,
            fragmentation_bytes=score.rank_peaks[r].fragmentation_bytes,
        )
        ranks.append(
            RankPrediction(
                rank=r,
                stages=tuple(rank_stages[r]),
                busy_s=score.sim.busy_s[r],
                memory=mem,
                total_bytes=score.rank_memory_bytes[r],
            )
        )
    worst = max(range(c.pp), key=lambda r: score.rank_post_s[r])
    return Prediction(
        step_time_s=step,
        pipeline_s=score.pipeline_s,
        dp_sync_s=dps[worst],
        optimizer_s=opts[worst],
        tokens_per_s=request.training.tokens_per_step / step,
        mfu=model_flops / (step * n_gpus * peak),
        model_tflops_per_gpu=model_flops / (step * n_gpus) / 1e12,
        hardware_tflops_per_gpu=hw_flops / (step * n_gpus) / 1e12,
        bubble_fraction=score.bubble_fraction,
        peak_memory_bytes=score.peak_memory_bytes,
        memory_cap_bytes=score.cap_bytes,
        margin_bytes=score.margin_bytes,
        feasible=score.feasible,
        stages=tuple(stages),
        ranks=tuple(ranks),
    )
