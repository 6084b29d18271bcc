#!/usr/bin/env bash
# Profile a Llama-2-7B-shaped block and a GPT-175B block at tp=8 in bf16 on ONE GPU, and print
# measured versus analytic (planner.catalog.models) time and memory per layer kind.
#
#   bash bench/gpu_profile.sh [GPU_CATALOG_NAME]     # default H200-SXM-141GB
#
# Sized for < 5 minutes on one H200: only two decoder blocks are built per model (identical
# blocks are measured once), micro-batch sizes 1 and 2, 5 timed rounds after 2 warm-up.
# Shapes:
#   Llama-2-7B: 32 layers, h=4096, 32 heads (kv 32), ffn 11008, vocab 32000, s=4096; tp=1 and 8
#   GPT-175B (Brown et al. 2020; Narayanan et al. 2021 Table 1): 96 layers, h=12288, 96 heads,
#     vocab 51200, s=2048; tp=8 (one tp rank's shapes: 12 heads, ffn 6144)
# Outputs land in ${OUT:-/tmp/meshplan-gpu-profile}: llama7b.json, gpt175b.json, compare.txt.
set -euo pipefail

GPU_NAME="${1:-H200-SXM-141GB}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/meshplan-gpu-profile}"
PY="${PY:-python}"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

"$PY" - <<'EOF'
import torch
assert torch.cuda.is_available(), "this script needs a CUDA GPU"
print("device:", torch.cuda.get_device_name(), "| torch", torch.__version__)
EOF

profile() {
  local name="$1" model="$2" seq="$3" tp="$4"
  echo "== profiling $name (tp=$tp, s=$seq, bf16)"
  local t0=$SECONDS
  "$PY" -c "from api.cli import main; main()" profile \
    --model "$model" --seq-length "$seq" --micro-batch-sizes 1,2 --tp "$tp" \
    --dtype bf16 --device cuda --repeats 5 --warmup 2 --no-progress \
    -o "$OUT/$name.json"
  echo "   ($((SECONDS - t0)) s)"
}

profile llama7b \
  "llama:name=llama-2-7b,num_layers=32,hidden_size=4096,num_attention_heads=32,num_kv_heads=32,ffn_hidden_size=11008,vocab_size=32000" \
  4096 1,8
profile gpt175b \
  "gpt:name=gpt-175b,num_layers=96,hidden_size=12288,num_attention_heads=96,vocab_size=51200" \
  2048 8

"$PY" - "$OUT" "$GPU_NAME" <<'EOF' | tee "$OUT/compare.txt"
import json
import sys
from pathlib import Path

from planner.catalog.hardware import lookup_gpu
from planner.catalog.models import analytic_costs
from planner.specs import ModelProfile

out, gpu_name = Path(sys.argv[1]), sys.argv[2]
gpu = lookup_gpu(gpu_name)
assert gpu is not None, f"unknown GPU {gpu_name}"
print(f"measured vs analytic ({gpu_name}, calibrated efficiency); ratio = measured / analytic")
print(f"{'model':8s} {'tp':>3s} {'mbs':>3s} {'kind':10s} {'fw ms':>8s} {'ana':>8s} {'ratio':>6s}"
      f" {'bw ms':>8s} {'ana':>8s} {'ratio':>6s} {'act MiB':>9s} {'ana':>9s} {'peak MiB':>9s}")
for name in ("llama7b", "gpt175b"):
    prof = ModelProfile.model_validate_json((out / f"{name}.json").read_text())
    assert prof.arch is not None
    for point in prof.points:
        ana = analytic_costs(
            prof.arch, gpu=gpu, dtype=prof.dtype, seq_length=prof.seq_length,
            micro_batch_size=point.micro_batch_size, tp=point.tp, sequence_parallel=False,
        )
        for kind, m in point.kinds.items():
            a = ana[kind]
            peak = prof.notes.get(f"peak_allocated_bytes.{kind}.mbs{point.micro_batch_size}.tp{point.tp}")
            peak_mib = f"{int(peak) / 2**20:9.1f}" if peak else f"{'-':>9s}"
            def r(x, y):
                return f"{x / y:6.2f}" if y > 0 else f"{'-':>6s}"
            print(f"{name:8s} {point.tp:3d} {point.micro_batch_size:3d} {kind:10s} "
                  f"{m.fw_s * 1e3:8.3f} {a.fw_s * 1e3:8.3f} {r(m.fw_s, a.fw_s)} "
                  f"{m.bw_s * 1e3:8.3f} {a.bw_s * 1e3:8.3f} {r(m.bw_s, a.bw_s)} "
                  f"{m.activation_bytes.none / 2**20:9.1f} {a.activation_bytes.none / 2**20:9.1f} "
                  f"{peak_mib}")
            if kind == "decoder":
                print(f"{'':27s} FLOPs measured/analytic {m.fw_flops / a.fw_flops:.3f}; "
                      f"achieved {m.fw_flops / m.fw_s / 1e12:.0f} TFLOP/s fw; "
                      f"act selective {m.activation_bytes.selective / 2**20:.1f} MiB "
                      f"(ana {a.activation_bytes.selective / 2**20:.1f}), "
                      f"full {m.activation_bytes.full / 2**20:.1f} MiB "
                      f"(ana {a.activation_bytes.full / 2**20:.1f})")
EOF
echo "wrote $OUT/llama7b.json $OUT/gpt175b.json $OUT/compare.txt"
