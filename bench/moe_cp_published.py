"""Predict the published context- and expert-parallel configurations of ../shared/cases/moe_cp.json.

python bench/moe_cp_published.py [--json] [--cases PATH] [--plan S]

`--plan S` also searches each row's request with the configuration left free (time limit S
seconds on the search's clock) and prints the plan beside the published configuration's
prediction: feasible, at least as fast, the search's status, gap and CPU time.

Each row evaluates the published configuration with meshplan's cost model (planner.cost.evaluate,
the catalog's default constants: nothing here is tuned to a row) and prints the published and
predicted numbers with the error. One rule for what a source leaves unsaid:
- micro-batch size 1; ZeRO-1 unless the source says otherwise; sequence parallel with tp > 1;
- recompute: the least of none, selective, full under which the configuration fits in the
  GPU's 80 GB (the sources do not all say; a run that did not fit would not be published).

Rows (the case file's names):
- `llama3-405b-cp16-131k` (Llama 3, Table 4): TP8 CP16 PP16 and 16M tokens per batch on 16,384
  GPUs. 8 x 16 x 16 x 4 = 8,192 GPUs, so the published DP 4 and 16,384 GPUs cannot both hold:
  the row runs DP = 16,384 / (8 x 16 x 16) = 8 on 16,384 GPUs, with the batch of "16M" tokens
  as Llama 3 counts batch sizes (§3.4.1: 4M, 8M, 16M, powers of two), 2^24 = 128 sequences of
  131,072, 16 per DP rank (DP 4 would hold half the tokens). The per-GPU rate depends on DP
  only through the gradient all-reduce (16 micro-batches per pipeline either way); DP 4 on
  8,192 GPUs with 64 sequences is printed beside it. K/V all-gathered (Llama 3 §3.3.2: the
  case's note). Interleaved 1F1B (Llama 3 §3.3.2) with vpp by bench/megatron_table1.py's rule,
  the smallest divisor >= 2 of the layers per rank, counting the embedding and the head as
  the layer slots Llama 3 takes off the first and last stages: (126 + 2) / 16 = 8, so 2.
  TFLOP/s are printed in two FLOP conventions:
  the model FLOPs of planner.cost (the attention core over the full s x s, Narayanan 2021)
  and with the causal half of the core left out (the work a causal kernel does).
- `torchtitan-llama3.1-8b-cp-scaling`: 8 H100s, CP 1/2/4/8 at 32K/64K/128K/256K, FSDP
  (ZeRO-3) over the 8 / cp other ranks, local batch 1 (global batch 8 / cp), full
  activation checkpointing (torchtitan's Table 2), K/V rotated by all-gather (torchtitan's
  default rotate method); tokens/s per GPU. The request names framework torchtitan, so the
  cost model runs torch's ring (planner.catalog.ring_attention.TORCH_CONTEXT_PARALLEL).
  Beside it, `torchtitan-llama3.1-405b-table6@cpN`: the same benchmark's 4D table (not in
  the case file; TORCHTITAN_405B_TABLE6 below).
- `mixtral-8x7b-64gpus`: TP1 EP8 PP4 VP8, global batch 256, sequence 4,096, 64 H100s
  (dp 16, edp 2): feasible on 80 GB.
- `deepseek-v3-2048gpus`: PP16 EP64 ZeRO-1, no TP, 2,048 GPUs (dp 128, edp 2), sequence
  4,096, global batch 15,360 (DeepSeek-V3 report §4.2, its final batch size); DualPipe's
  closest schedule here is ZB-V (two chunks per rank in a V): feasible on 80 GB.
The MoE models are the catalog's presets (planner.catalog.models.PRESETS); the bench checks
that their shapes agree with the case file's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.catalog.models import PRESETS
from planner.catalog.moe import layer_flops
from planner.cost import evaluate
from planner.errors import InfeasibleError, SpecError
from planner.plan import Prediction
from planner.search import search
from planner.specs import (
    Candidate,
    ClusterSpec,
    Constraints,
    ModelArch,
    PlanRequest,
    TrainingSpec,
)
from planner.specs.base import Framework, RecomputeMode, ScheduleName

GIB = 1024**3
REPO = Path(__file__).resolve().parents[1]
DEFAULT_CASES = REPO / ".." / "shared" / "cases" / "moe_cp.json"
MODES: tuple[RecomputeMode, ...] = ("none", "selective", "full")


def load(cases_path: str | Path = DEFAULT_CASES) -> dict[str, Any]:
    with open(cases_path) as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def dense_arch(name: str, m: dict[str, Any]) -> ModelArch:
    return ModelArch(
        family="llama",
        name=name,
        num_layers=m["num_layers"],
        hidden_size=m["hidden_size"],
        num_attention_heads=m["num_attention_heads"],
        num_kv_heads=m["num_kv_heads"],
        ffn_hidden_size=m["ffn_hidden_size"],
        vocab_size=m["vocab_size"],
    )


def moe_arch(name: str, m: dict[str, Any]) -> ModelArch:
    """The catalog preset, checked against the case file's shapes."""
    arch = PRESETS[name]
    moe = arch.moe
    assert moe is not None
    got = {
        "num_layers": arch.num_layers,
        "hidden_size": arch.hidden_size,
        "num_attention_heads": arch.num_attention_heads,
        "vocab_size": arch.vocab_size,
        "num_experts": moe.num_experts,
        "experts_per_token": moe.experts_per_token,
        "moe_ffn_hidden_size": moe.moe_ffn_hidden_size,
    }
    bad = {k: (v, m[k]) for k, v in got.items() if k in m and m[k] != v}
    if bad:
        raise SystemExit(f"preset {name} disagrees with the case file (preset, file): {bad}")
    return arch


def request(
    arch: ModelArch,
    case: dict[str, Any],
    *,
    num_gpus: int,
    gbs: int,
    seq: int,
    framework: Framework | None = None,
) -> PlanRequest:
    return PlanRequest(
        model=arch,
        cluster=ClusterSpec(
            gpu=case["gpu"], num_gpus=num_gpus, gpus_per_node=case["gpus_per_node"]
        ),
        training=TrainingSpec(global_batch_size=gbs, seq_length=seq, dtype="bf16"),
        constraints=Constraints(framework=framework),
    )


def least_recompute(req: PlanRequest, candidate: Candidate) -> tuple[Candidate, Prediction]:
    """The module docstring's rule: the least recompute under which it fits (else full)."""
    pred: Prediction | None = None
    for mode in MODES:
        c = candidate.model_copy(update={"recompute": mode})
        pred = evaluate(req, c)
        if pred.feasible:
            return c, pred
    assert pred is not None
    return c, pred


def causal_core_flops(arch: ModelArch, *, seq: int, tokens: int) -> float:
    """Half the attention core's model FLOPs (forward and backward) for `tokens` tokens:
    what the full-s x s convention counts and a causal kernel skips."""
    core = sum(
        layer_flops(arch, i, micro_batch_size=1, seq_length=seq).attention_core
        for i in range(arch.num_layers)
    )
    return 0.5 * 3.0 * core * tokens / seq


def _row(
    name: str, req: PlanRequest, pred: Prediction, candidate: Candidate, **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "request": req.model_dump(mode="json"),
        "config": candidate.model_dump(mode="json", exclude={"stages"}, exclude_defaults=False),
        "step_time_s": round(pred.step_time_s, 4),
        "peak_memory_gib": round(pred.peak_memory_bytes / GIB, 2),
        "feasible": pred.feasible,
        "bubble_fraction": round(pred.bubble_fraction, 4),
        **extra,
    }


def _tokens_row(
    name: str,
    req: PlanRequest,
    pred: Prediction,
    candidate: Candidate,
    published: float,
    num_gpus: int,
) -> dict[str, Any]:
    """A row checked on tokens per second per GPU, with the relative error of the prediction."""
    per_gpu = pred.tokens_per_s / num_gpus
    return _row(
        name,
        req,
        pred,
        candidate,
        published_tokens_per_s_per_gpu=published,
        predicted_tokens_per_s_per_gpu=round(per_gpu, 1),
        error=round((per_gpu - published) / published, 4),
    )


def llama3_405b(doc: dict[str, Any], case: dict[str, Any]) -> list[dict[str, Any]]:
    arch = dense_arch(case["model"], doc["models"][case["model"]])
    cfg, seq = case["config"], case["seq_length"]
    published = float(case["measured"]["tflops_per_gpu"])
    out = []
    grid = cfg["tp"] * cfg["cp"] * cfg["pp"]
    tokens = 2 ** round(math.log2(case["tokens_per_batch"]))  # "16M" = 2^24
    per_dp = tokens // seq // (case["num_gpus"] // grid)
    slots = (arch.num_layers + 2) // cfg["pp"]
    vpp = next(v for v in range(2, slots + 1) if slots % v == 0)
    for num_gpus in (case["num_gpus"], grid * cfg["dp"]):
        dp = num_gpus // grid
        gbs = per_dp * dp
        req = request(arch, case, num_gpus=num_gpus, gbs=gbs, seq=seq)
        base = Candidate(
            tp=cfg["tp"],
            cp=cfg["cp"],
            cp_comm="all_gather",
            pp=cfg["pp"],
            dp=dp,
            vpp=vpp,
            schedule="interleaved-1f1b",
            sequence_parallel=True,
            zero_stage=1,
        )
        c, pred = least_recompute(req, base)
        skipped = causal_core_flops(arch, seq=seq, tokens=gbs * seq) / (pred.step_time_s * num_gpus)
        model = pred.model_tflops_per_gpu
        causal = model - skipped / 1e12
        out.append(
            _row(
                f"{case['name']}@{num_gpus}",
                req,
                pred,
                c,
                published_tflops_per_gpu=published,
                predicted_tflops_per_gpu=round(model, 1),
                predicted_causal_tflops_per_gpu=round(causal, 1),
                error=round((model - published) / published, 4),
                error_causal=round((causal - published) / published, 4),
            )
        )
    return out


def torchtitan(doc: dict[str, Any], case: dict[str, Any]) -> list[dict[str, Any]]:
    arch = dense_arch(case["model"], doc["models"][case["model"]])
    n = case["num_gpus"]
    out = []
    for point in case["points"]:
        cp, seq = point["cp"], point["seq_length"]
        dp = n // cp
        req = request(arch, case, num_gpus=n, gbs=dp, seq=seq, framework="torchtitan")
        base = Candidate(cp=cp, cp_comm="all_gather", dp=dp, zero_stage=3)
        c, pred = least_recompute(req, base)
        published = float(point["tokens_per_s_per_gpu"])
        out.append(_tokens_row(f"{case['name']}@cp{cp}", req, pred, c, published, n))
    return out


# torchtitan's 4D table (benchmarks/llama3_h100_202412_torchtitan.md, Table 6, in the
# torchtitan repository; not in the case file): Llama 3.1 405B on 512 of the same H100s, TP 8,
# PP 8 (1F1B), FSDP x CP = 8, local batch 8, full activation checkpointing; TPS per GPU.
TORCHTITAN_405B_TABLE6: tuple[tuple[int, int, float], ...] = (
    (1, 32768, 76.0),
    (2, 65536, 47.0),
    (4, 131072, 31.0),
    (8, 262144, 16.0),
)


def torchtitan_405b(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Table 6's points (TORCHTITAN_405B_TABLE6): torchtitan's pipeline microbatches default
    to the pipeline degree, so 8 micro-batches of 1 sequence per pipeline; FSDP is costed as
    ZeRO-1 (planner.cost refuses ZeRO-3 with pp > 1); sequence parallel with TP."""
    arch = dense_arch("llama3-405b", doc["models"]["llama3-405b"])
    case = {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}
    out = []
    for cp, seq, published in TORCHTITAN_405B_TABLE6:
        dp = 8 // cp
        req = request(arch, case, num_gpus=512, gbs=8 * dp, seq=seq, framework="torchtitan")
        base = Candidate(
            tp=8,
            pp=8,
            cp=cp,
            dp=dp,
            cp_comm="all_gather",
            schedule="1f1b",
            zero_stage=1,
            sequence_parallel=True,
            recompute="full",
        )
        pred = evaluate(req, base)
        name = f"torchtitan-llama3.1-405b-table6@cp{cp}"
        out.append(_tokens_row(name, req, pred, base, published, 512))
    return out


def feasibility(
    doc: dict[str, Any], case: dict[str, Any], candidate: Candidate, gbs: int
) -> list[dict[str, Any]]:
    arch = moe_arch(case["model"], doc["models"][case["model"]])
    req = request(arch, case, num_gpus=case["num_gpus"], gbs=gbs, seq=case["seq_length"])
    try:
        c, pred = least_recompute(req, candidate)
    except SpecError as exc:
        return [{"name": case["name"], "error": str(exc), "feasible": False}]
    tflops = round(pred.model_tflops_per_gpu, 1)
    return [_row(case["name"], req, pred, c, model_tflops_per_gpu=tflops)]


def _published_moe(
    case: dict[str, Any], *, vpp: int, schedule: ScheduleName, zero_stage: int
) -> Candidate:
    """A published MoE configuration (tp, ep, pp from the case; dp the rest of the GPUs)."""
    cfg = case["config"]
    tp, pp = cfg["tp"], cfg["pp"]
    return Candidate(
        tp=tp,
        ep=cfg["ep"],
        pp=pp,
        dp=case["num_gpus"] // (tp * pp),
        vpp=vpp,
        schedule=schedule,
        zero_stage=zero_stage,
    )


def rows(cases_path: str | Path = DEFAULT_CASES) -> list[dict[str, Any]]:
    doc = load(cases_path)
    out: list[dict[str, Any]] = []
    for case in doc["cases"]:
        name = case["name"]
        cfg = case.get("config", {})
        if name.startswith("llama3-405b"):
            out += llama3_405b(doc, case)
        elif name.startswith("torchtitan"):
            out += torchtitan(doc, case)
            out += torchtitan_405b(doc)
        elif name.startswith("mixtral"):
            c = _published_moe(case, vpp=cfg["vpp"], schedule="interleaved-1f1b", zero_stage=1)
            out += feasibility(doc, case, c, case["global_batch_size"])
        elif name.startswith("deepseek"):
            c = _published_moe(case, vpp=2, schedule="zbv", zero_stage=cfg["zero_stage"])
            out += feasibility(doc, case, c, 15360)
    return out


def plan_row(row: dict[str, Any], time_limit_s: float) -> dict[str, Any]:
    """The planner's own plan for a row's request (the published configuration left free),
    against the published configuration's prediction: the issue's check that the plan is
    feasible and predicted at least as fast."""
    req = PlanRequest.model_validate(row["request"])
    req = req.model_copy(
        update={"search": req.search.model_copy(update={"time_limit_s": time_limit_s})}
    )
    started = time.process_time()
    try:
        result = search(req, clock=time.monotonic)
    except InfeasibleError as exc:
        return {"name": row["name"], "plan": None, "error": str(exc).splitlines()[0]}
    plan, stats = result.plan, result.search
    step = plan.prediction.step_time_s
    return {
        "name": row["name"],
        "plan": plan.candidate().model_dump(mode="json", exclude={"stages"}),
        "plan_step_time_s": round(step, 4),
        "published_step_time_s": row["step_time_s"],
        "at_least_as_fast": step <= row["step_time_s"] * (1 + 1e-9),
        "feasible": plan.prediction.feasible,
        "status": stats.status,
        "gap": stats.gap,
        "cpu_s": round(time.process_time() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cases", default=str(DEFAULT_CASES))
    ap.add_argument(
        "--plan",
        type=float,
        metavar="S",
        help="also search each row's request (time limit S seconds) and compare the plan",
    )
    args = ap.parse_args(argv)
    table = rows(args.cases)
    planned = [plan_row(r, args.plan) for r in table if "step_time_s" in r] if args.plan else []
    if args.json:
        print(json.dumps({"rows": table, "plans": planned}, indent=1))
        return 0
    for r in table + planned:
        shown = {k: v for k, v in r.items() if k not in ("config", "request")}
        print(json.dumps(shown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
