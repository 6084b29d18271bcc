"""Measured (profiler on CPU) versus analytic (planner.catalog.models) per-layer costs.

    python bench/profile_vs_analytic.py [--family gpt|llama] [--hidden 256] [--seq 256]
        [--micro-batch-sizes 1,2,4] [--dtype fp32|bf16] [--repeats 5] [--json]

The analytic catalog prices a layer on a GPU from two numbers (peak matmul FLOP/s and memory
bandwidth, `planner.catalog.efficiency`). To compare its *times* with a CPU measurement, this
script first measures this CPU's two numbers (a large fp32/bf16 matmul; a large tensor copy)
and hands them to `analytic_costs` as a `GpuSpec` with efficiency 1.0: a ratio measured /
analytic of 1.0 then means the roofline explains the measured time.

Printed per layer kind and micro-batch size:
- FLOPs: the profiler's FlopCounterMode count / the catalog's forward FLOPs;
- time ratios measured / analytic for forward, input-gradient and weight-gradient;
- activation bytes saved for backward (recompute none / selective / full): measured, the
  catalog's, and Korthikanti et al. 2022 Table 2 (s*b*h*(34 + 5*a*s/h) at 16-bit with dropout
  and materialised scores; full recompute 2*s*b*h) scaled to the element size.
The reference models have no dropout and use fused (flash) attention, so the measured bytes
are expected below Korthikanti's: 16 s*b*h elements + log-sum-exp for the GPT block.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from planner.catalog.efficiency import Efficiency
from planner.catalog.hardware import GpuSpec
from planner.catalog.models import analytic_costs
from planner.specs import ModelArch
from profiler.layer_profiler import ProfileOptions, parse_dtype, profile_model
from profiler.layer_source import ModelSource


def cpu_roofline(dtype: torch.dtype) -> GpuSpec:
    """This CPU as a GpuSpec: measured matmul FLOP/s and copy bandwidth."""
    n = 1024
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    a @ b
    reps = 5
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    flops = 2 * n**3 * reps / (time.perf_counter() - t0)
    x = torch.empty(32 * 2**20, dtype=torch.float32)  # 128 MiB
    y = torch.empty_like(x)
    y.copy_(x)
    t0 = time.perf_counter()
    for _ in range(reps):
        y.copy_(x)
    bw = 2 * x.numel() * 4 * reps / (time.perf_counter() - t0)  # read + write
    return GpuSpec(
        name="this-cpu",
        peak_bf16_tflops=flops / 1e12,
        memory_gib=64.0,
        hbm_gbps=bw / 1e9,
        nvlink_gbps=1.0,
        inter_node_gbps=1.0,
    )


def korthikanti_bytes(arch: ModelArch, *, s: int, b: int, elem: int) -> dict[str, float]:
    """Table 2 (no parallelism), 16-bit activations; scaled by elem/2 for other widths."""
    h, a = arch.hidden_size, arch.num_attention_heads
    scale = elem / 2
    return {
        "none": s * b * h * (34 + 5 * a * s / h) * scale,
        "selective": 34 * s * b * h * scale,
        "full": 2 * s * b * h * scale,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--family", choices=("gpt", "llama"), default="gpt")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--micro-batch-sizes", default="1,2,4")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = parse_dtype(args.dtype)
    fields: dict[str, Any] = {
        "family": args.family,
        "num_layers": args.layers,
        "hidden_size": args.hidden,
        "num_attention_heads": args.heads,
        "vocab_size": args.vocab,
    }
    if args.family == "llama":
        fields |= {
            "num_kv_heads": max(1, args.heads // 2),
            "ffn_hidden_size": 8 * args.hidden // 3 // 64 * 64 or 64,
        }
    arch = ModelArch(**fields)
    mbs = tuple(int(x) for x in args.micro_batch_sizes.split(","))
    gpu = cpu_roofline(dtype)
    source = ModelSource(name=arch.display_name, seq_length=args.seq, arch=arch)
    t0 = time.perf_counter()
    result = profile_model(
        source,
        ProfileOptions(micro_batch_sizes=mbs, dtype=dtype, repeats=args.repeats, warmup=2),
    )
    wall = time.perf_counter() - t0
    elem = torch.tensor([], dtype=dtype).element_size()
    rows: list[dict[str, Any]] = []
    for point in result.profile.points:
        ana = analytic_costs(
            arch,
            gpu=gpu,
            dtype=args.dtype,
            seq_length=args.seq,
            micro_batch_size=point.micro_batch_size,
            tp=1,
            sequence_parallel=False,
            efficiency=Efficiency(matmul_fraction=1.0, hbm_fraction=1.0),
        )
        kb = korthikanti_bytes(arch, s=args.seq, b=point.micro_batch_size, elem=elem)
        for kind, m in point.kinds.items():
            a = ana[kind]

            def ratio(x: float, y: float) -> float | None:
                return x / y if y > 0 else None

            rows.append(
                {
                    "kind": kind,
                    "micro_batch_size": point.micro_batch_size,
                    "flops_ratio": ratio(m.fw_flops, a.fw_flops),
                    "fw_ratio": ratio(m.fw_s, a.fw_s),
                    "bw_input_ratio": ratio(m.bw_input_s, a.bw_input_s),
                    "bw_weight_ratio": ratio(m.bw_weight_s, a.bw_weight_s),
                    "fw_spread": (m.spread or {}).get("fw_s"),
                    "measured_bytes": m.activation_bytes.model_dump(),
                    "analytic_bytes": a.activation_bytes.model_dump(),
                    "korthikanti_bytes": kb if kind == "decoder" else None,
                }
            )
    summary = {
        "arch": arch.model_dump(),
        "seq_length": args.seq,
        "dtype": args.dtype,
        "cpu_matmul_gflops": gpu.peak_bf16_tflops * 1e3,
        "cpu_copy_gbps": gpu.hbm_gbps,
        "profile_wall_s": wall,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{arch.display_name} s={args.seq} {args.dtype}: CPU roofline "
        f"{summary['cpu_matmul_gflops']:.1f} GFLOP/s matmul, {gpu.hbm_gbps:.1f} GB/s copy; "
        f"profiled in {wall:.1f} s"
    )
    print("measured / analytic (1.0 = the roofline explains it)")
    print(" mbs kind        FLOPs    fw    bw_in   bw_w   fw spread")

    def f(x: float | None) -> str:
        return "   -  " if x is None else f"{x:6.2f}"

    for r in rows:
        print(
            f"{r['micro_batch_size']:4d} {r['kind']:10s} {f(r['flops_ratio'])} {f(r['fw_ratio'])} "
            f"{f(r['bw_input_ratio'])} {f(r['bw_weight_ratio'])}   {(r['fw_spread'] or 0):.1%}"
        )
    print("\nactivation bytes saved for backward (MiB): measured | catalog | Korthikanti T2")
    print(" mbs kind        none                    selective               full")
    for r in rows:
        cells = []
        for mode in ("none", "selective", "full"):
            k = r["korthikanti_bytes"][mode] / 2**20 if r["korthikanti_bytes"] else None
            measured = r["measured_bytes"][mode] / 2**20
            catalog = r["analytic_bytes"][mode] / 2**20
            cells.append(
                f"{measured:6.2f}|{catalog:6.2f}|" + ("  -   " if k is None else f"{k:6.2f}")
            )
        print(f"{r['micro_batch_size']:4d} {r['kind']:10s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
