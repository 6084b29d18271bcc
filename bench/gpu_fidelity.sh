#!/usr/bin/env bash
# GPU fidelity on ONE GPU, sized for under 5 minutes on an H100/H200: a GPT block stack in bf16,
# pp=1 (tp=1, dp=1) with recompute none / selective / full. For each variant: profile on the GPU
# (profiler.layer_profiler), predict with the cost model (planner.cost.fixed_plan on the
# catalog GPU), run the plan with torchrun (profiler.run_plan, CUDA events, max_memory_allocated)
# and print predicted vs measured step time, activation bytes and peak memory.
#
#   bash bench/gpu_fidelity.sh [GPU_CATALOG_NAME] [OUT_DIR]
#     GPU_CATALOG_NAME: H200-SXM-141GB (default), H100-SXM-80GB or A100-SXM-80GB
#     OUT_DIR: where plans, reports and fidelity.json go (default: a temporary directory)
#   DEVICE=cpu bash bench/gpu_fidelity.sh CPU   # dry run of the whole script on CPU, tiny model
#
# Memory note: the runner trains bf16 parameters with torch's Adam (bf16 states: 2+2+4 bytes per
# parameter), while the plan counts mixed-precision Adam (2+2+12, ZeRO paper); the script prints
# the predicted peak both as planned and with the runner's optimizer bytes, so the activation and
# allocator terms can be read apart.
set -euo pipefail

GPU="${1:-H200-SXM-141GB}"
OUT="${2:-$(mktemp -d)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=4

DEVICE="${DEVICE:-cuda}"
if [ "$DEVICE" = cuda ]; then
  DTYPE=bf16
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA GPU")'
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
else
  DTYPE=fp32
  export OMP_NUM_THREADS=1
fi

# 1. profile + plans (one Python process; ~1 minute)
"$PY" - "$GPU" "$OUT" "$DEVICE" <<'PYEOF'
import sys
from pathlib import Path

import torch

sys.path.insert(0, "bench")
from fidelity_cpu import profile, request_for  # noqa: E402

from planner.specs.model import ModelArch  # noqa: E402
from planner.specs.request import Candidate  # noqa: E402
from planner.cost import fixed_plan  # noqa: E402

gpu, out, device = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if device == "cuda":
    arch = ModelArch(family="gpt", name="gpu-fidelity-gpt", num_layers=8, hidden_size=2048,
                     num_attention_heads=16, vocab_size=32000)
    prof = profile(20, arch=arch, seq_length=2048, micro_batch_size=2, device="cuda",
                   dtype=torch.bfloat16)
else:  # dry run
    arch = ModelArch(family="gpt", name="dry-run-gpt", num_layers=2, hidden_size=64,
                     num_attention_heads=4, vocab_size=128)
    prof = profile(3, arch=arch, seq_length=32, micro_batch_size=2)
(out / "profile.json").write_text(prof.model_dump_json(indent=1))
for mode in ("none", "selective", "full"):
    c = Candidate(pp=1, schedule="1f1b", micro_batch_size=2, recompute=mode)
    plan = fixed_plan(request_for(prof, 1, 8, gpu=gpu), c)  # 4 micro-batches of 2
    (out / f"plan_{mode}.json").write_text(plan.model_dump_json(indent=1))
    print(f"planned recompute={mode}: predicted step {plan.prediction.step_time_s * 1e3:.1f} ms")
PYEOF

# 2. run each plan (~30 s each)
for mode in none selective full; do
  torchrun --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "localhost:${PORT:-29531}" \
    -m profiler.run_plan --plan "$OUT/plan_$mode.json" --device "$DEVICE" --dtype "$DTYPE" \
    --steps 10 --warmup 3 --report "$OUT/report_$mode.json"
done

# 3. predicted vs measured
"$PY" - "$OUT" <<'PYEOF'
import json
import sys
from pathlib import Path

from planner.plan import Plan
from planner.runreport import RunReport

out = Path(sys.argv[1])
rows = []
print(f"{'recompute':10s} {'step pred ms':>12s} {'meas ms':>9s} {'err':>7s} "
      f"{'act pred GiB':>12s} {'meas GiB':>9s} {'err':>7s} {'peak pred GiB':>13s} "
      f"{'(runner opt)':>12s} {'meas GiB':>9s} {'err':>7s}")
for mode in ("none", "selective", "full"):
    plan = Plan.model_validate_json((out / f"plan_{mode}.json").read_text())
    rep = RunReport.model_validate_json((out / f"report_{mode}.json").read_text())
    pred, stage, rank = plan.prediction, rep.stages[0], plan.prediction.ranks[0]
    params = rank.memory.params_bytes
    # the runner's Adam keeps m and v in the parameters' dtype: 2 x params bytes
    runner_total = rank.total_bytes - rank.memory.optimizer_bytes + 2 * params
    row = {
        "recompute": mode,
        "predicted_step_time_s": pred.step_time_s,
        "measured_step_time_s": rep.step_time_s,
        "step_time_error": (rep.step_time_s - pred.step_time_s) / pred.step_time_s,
        "predicted_activation_bytes": pred.stages[0].activation_bytes,
        "measured_activation_bytes": stage.activation_bytes,
        "memory_error": (stage.activation_bytes - pred.stages[0].activation_bytes)
        / pred.stages[0].activation_bytes,
        "predicted_peak_bytes": rank.total_bytes,
        "predicted_peak_bytes_runner_optimizer": runner_total,
        "measured_peak_bytes": stage.peak_memory_bytes,
        "peak_memory_error": (stage.peak_memory_bytes - runner_total) / runner_total,
    }
    rows.append(row)
    g = 2**30
    print(f"{mode:10s} {pred.step_time_s * 1e3:12.1f} {rep.step_time_s * 1e3:9.1f} "
          f"{row['step_time_error']:+7.1%} {row['predicted_activation_bytes'] / g:12.2f} "
          f"{stage.activation_bytes / g:9.2f} {row['memory_error']:+7.1%} "
          f"{rank.total_bytes / g:13.2f} {runner_total / g:12.2f} "
          f"{stage.peak_memory_bytes / g:9.2f} {row['peak_memory_error']:+7.1%}")
(out / "fidelity.json").write_text(json.dumps(rows, indent=2))
print(f"wrote {out / 'fidelity.json'}")
PYEOF
