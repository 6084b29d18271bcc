"""Time one context-parallel rank's attention per layer, kernel by kernel, on one GPU, beside the
cost model's prediction of the same kernels: the measurement the torchtitan 8B CP trend waits for.

    python bench/gpu_cp_steps.py [--points 1,2,4,8] [--repeats 5] [--json] [--out FILE]
    python bench/gpu_cp_steps.py --device cpu --tiny          # dry run (shapes / 256)

The torchtitan benchmark's points (../shared/cases/moe_cp.json, `torchtitan-llama3.1-8b-cp-
scaling`: Llama 3.1 8B, sequence 32K x cp, local batch 1) hold 32K tokens per rank at every
cp, so the part of a rank's time that grows from point to point is its attention core: cp
ring steps per layer (planner.catalog.ring_attention), each its own kernel over chunks of
c = s / (2 cp) tokens, and torch's fp32 merges between them. docs/cost-model.md §8 finds the
model's per-token time A + B s agreeing in A and short in B by 1.5-1.9x; this script times B's
parts on the hardware:

- step 0: SDPA (flash backend) causal over the rank's 2c queries and keys, forward and
  backward;
- steps i <= r: the 2c queries over c keys; steps i > r: c queries over 2c keys (no mask);
  rank r runs r of the first and cp - 1 - r of the second, so the slowest rank is printed;
- torch's merge of each step i >= 1 into the fp32 output (`_SDPAMerger`'s cast, subtract,
  sigmoid-scale, subtract) and the backward's fp32 accumulation of dQ, dK, dV, as
  planner.catalog.ring_attention prices them.

K and V carry all 32 query heads (torchtitan's `repeat_kv` at the benchmark's commit). Each
kernel is timed with CUDA events over `--repeats` runs after one warm-up; the prediction is
planner.catalog.kernels.flash_attention_s for the same shape on the catalog's H100 (or
`--gpu`), and the ring's per-layer attention_fw_s / attention_bw_s of the decoder layer at
that point (planner.cost.source). Collective exchanges need cp GPUs and are not timed here.
Output: one row per point with measured and predicted milliseconds per layer and their ratio,
and with `--out` the same as JSON (for `--json`, on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.moe_cp_published import dense_arch, load, request
from planner.catalog.efficiency import DEFAULT_EFFICIENCY
from planner.catalog.hardware import GPUS
from planner.catalog.kernels import flash_attention_s
from planner.cost.source import resolve_costs

CASE = "torchtitan-llama3.1-8b-cp-scaling"
TOKENS_PER_RANK = 32768  # local batch 1 at cp = s / 32K: every point holds 32K tokens a rank


@dataclass(frozen=True)
class Shape:
    """One flash kernel: `queries` rows over `keys` keys, `heads` heads of `head_dim`."""

    queries: int
    keys: int
    heads: int
    head_dim: int
    causal: bool


def _events() -> tuple[Any, Any]:
    import torch

    event: Any = torch.cuda.Event
    return event(enable_timing=True), event(enable_timing=True)


def _timer(device: str) -> Callable[[Callable[[], object], int], float]:
    """Seconds per call of fn, least over `repeats` after a warm-up (CUDA events on a GPU)."""
    import torch

    def timed(fn: Callable[[], object], repeats: int) -> float:
        fn()
        best = float("inf")
        for _ in range(repeats):
            if device == "cuda":
                start, end = _events()
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
        return best

    return timed


def time_kernel(shape: Shape, device: str, repeats: int) -> tuple[float, float]:
    """(forward s, backward s) of SDPA over `shape` in bf16 (flash backend on a GPU)."""
    import torch
    import torch.nn.functional as F

    dtype = torch.bfloat16
    q = torch.randn(1, shape.heads, shape.queries, shape.head_dim, device=device, dtype=dtype)
    k = torch.randn(1, shape.heads, shape.keys, shape.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    timed = _timer(device)
    ctx: Any
    if device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION])
    else:
        import contextlib

        ctx = contextlib.nullcontext()
    with ctx:
        fw = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal), repeats)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)
        grad = torch.randn_like(out)

        def backward() -> object:
            return torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

        bw = timed(backward, repeats)
    return fw, bw


def time_merges(
    rows: int, heads: int, head_dim: int, device: str, repeats: int
) -> tuple[float, float]:
    """(forward merge s, backward accumulate s) of one ring step i >= 1, the element-wise work
    torch's ring does with `convert_to_f32` (planner.catalog.ring_attention's TORCH_* terms):
    the step's output cast and merged into the fp32 output by the log-sum-exp difference; dQ,
    dK and dV added into fp32 accumulators."""
    import torch

    out32 = torch.zeros(1, heads, rows, head_dim, device=device, dtype=torch.float32)
    lse = torch.zeros(1, heads, rows, 1, device=device, dtype=torch.float32)
    block = torch.randn(1, heads, rows, head_dim, device=device, dtype=torch.bfloat16)
    block_lse = torch.randn(1, heads, rows, 1, device=device, dtype=torch.float32)

    def merge() -> object:
        b = block.to(torch.float32)
        diff = out32 - b
        scaled = torch.sigmoid(block_lse - lse) * diff
        return out32 - scaled

    acc = [torch.zeros_like(out32) for _ in range(3)]
    grads = [torch.randn_like(block) for _ in range(3)]

    def accumulate() -> object:
        for a, g in zip(acc, grads, strict=True):
            a.add_(g)
        return acc

    timed = _timer(device)
    return timed(merge, repeats), timed(accumulate, repeats)


def predicted_kernel(shape: Shape, gpu_name: str) -> tuple[float, float]:
    """The cost model's (forward s, backward s) for one kernel of `shape`."""
    gpu = GPUS[gpu_name]
    eff = DEFAULT_EFFICIENCY
    common = {
        "seq": shape.keys,
        "queries": shape.queries,
        "head_dim": shape.head_dim,
        "batch_heads": shape.heads,
        "causal": shape.causal,
        "gpu": gpu,
        "eff": eff,
        "element_bytes": 2,
    }
    return (
        flash_attention_s(backward=False, **common),  # type: ignore[arg-type]
        flash_attention_s(backward=True, **common),  # type: ignore[arg-type]
    )


def predicted_layer(cp: int, seq: int, gpu_name: str) -> tuple[float, float]:
    """The decoder layer's ring attention (attention_fw_s, attention_bw_s) at this point, as
    planner.cost sees it for framework torchtitan (0, 0 at cp = 1: no ring)."""
    doc = load()
    case = next(c for c in doc["cases"] if c["name"] == CASE)
    arch = dense_arch(case["model"], doc["models"][case["model"]])
    req = request(
        arch,
        {**case, "gpu": gpu_name},
        num_gpus=case["num_gpus"],
        gbs=case["num_gpus"] // cp,
        seq=seq,
        framework="torchtitan",
    )
    src = resolve_costs(req)
    costs = src.layer_costs(micro_batch_size=1, tp=1, sequence_parallel=False, cp=cp)
    layer = next(c for ref, c in zip(src.layers, costs, strict=True) if ref.kind == "decoder")
    return layer.attention_fw_s, layer.attention_bw_s


def _kernel_ms(v: tuple[float, float, float, float]) -> dict[str, float]:
    fw, bw, pfw, pbw = (x * 1e3 for x in v)
    return {"fw": fw, "bw": bw, "predicted_fw": pfw, "predicted_bw": pbw}


def point_row(
    cp: int, *, heads: int, head_dim: int, tokens: int, device: str, repeats: int, gpu: str
) -> dict[str, Any]:
    """Measured and predicted attention milliseconds per layer of the slowest rank at cp."""
    c = tokens // 2
    steps = [Shape(2 * c, 2 * c, heads, head_dim, causal=True)]
    wide, tall = Shape(2 * c, c, heads, head_dim, False), Shape(c, 2 * c, heads, head_dim, False)
    kernels: dict[str, tuple[float, float, float, float]] = {}
    for name, shape in (("step0", steps[0]), ("wide", wide), ("tall", tall)):
        if name != "step0" and cp == 1:
            continue
        fw, bw = time_kernel(shape, device, repeats)
        pfw, pbw = predicted_kernel(shape, gpu)
        kernels[name] = (fw, bw, pfw, pbw)
    merge_fw, merge_bw = time_merges(2 * c, heads, head_dim, device, repeats) if cp > 1 else (0, 0)
    totals = []
    for r in range(cp):  # rank r: step 0, r wide steps, cp - 1 - r tall ones, cp - 1 merges
        parts = [kernels["step0"]]
        if cp > 1:
            parts += [kernels["wide"]] * r + [kernels["tall"]] * (cp - 1 - r)
        fw = sum(p[0] for p in parts) + (cp - 1) * merge_fw
        bw = sum(p[1] for p in parts) + (cp - 1) * merge_bw
        totals.append((fw + bw, fw, bw, sum(p[2] for p in parts), sum(p[3] for p in parts)))
    _, fw, bw, kfw, kbw = max(totals)
    full_size = tokens == TOKENS_PER_RANK and heads == 32 and head_dim == 128
    if cp > 1 and full_size:
        layer_fw, layer_bw = predicted_layer(cp, tokens * cp, gpu)
    else:  # no ring at cp 1; a dry run's shapes are no layer of the model: its kernels' sum
        layer_fw, layer_bw = kfw, kbw
    ms = 1e3
    return {
        "cp": cp,
        "seq_length": tokens * cp,
        "kernels_ms": {k: _kernel_ms(v) for k, v in kernels.items()},
        "merge_ms": {"fw": merge_fw * ms, "bw": merge_bw * ms},
        "measured_fw_ms": fw * ms,
        "measured_bw_ms": bw * ms,
        "predicted_fw_ms": layer_fw * ms,
        "predicted_bw_ms": layer_bw * ms,
        "ratio_fw": fw / layer_fw if layer_fw else None,
        "ratio_bw": bw / layer_bw if layer_bw else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="1,2,4,8", help="cp degrees (comma-separated)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--gpu", default="H100-SXM-80GB", help="catalog GPU for the prediction")
    ap.add_argument("--tiny", action="store_true", help="shapes / 256 and 2 heads (a dry run)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda needs a CUDA GPU (use --device cpu --tiny for a dry run)")
        return 2
    if args.gpu not in GPUS:
        print(f"error: --gpu {args.gpu!r} is not in the catalog ({', '.join(sorted(GPUS))})")
        return 2
    heads, head_dim, tokens = (2, 64, TOKENS_PER_RANK // 256) if args.tiny else (32, 128, 32768)
    rows = [
        point_row(
            int(cp),
            heads=heads,
            head_dim=head_dim,
            tokens=tokens,
            device=args.device,
            repeats=args.repeats,
            gpu=args.gpu,
        )
        for cp in args.points.split(",")
    ]
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'cp':>3} {'seq':>7} {'fw ms':>9} {'pred':>9} {'x':>6} {'bw ms':>9} {'pred':>9} {'x':>6}"
    )
    for r in rows:
        print(
            f"{r['cp']:>3} {r['seq_length']:>7} {r['measured_fw_ms']:>9.2f} "
            f"{r['predicted_fw_ms']:>9.2f} {r['ratio_fw'] or 0:>6.2f} {r['measured_bw_ms']:>9.2f} "
            f"{r['predicted_bw_ms']:>9.2f} {r['ratio_bw'] or 0:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
