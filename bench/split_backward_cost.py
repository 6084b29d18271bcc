"""Does the profile price ZB-V's split backward and full recompute as the runner runs them?

    python bench/split_backward_cost.py [--blocks K] [--rounds R]

Profiles the fidelity bench's GPT (bench/fidelity_cpu.py: 8 layers, h 128, s 128, mbs 2; one
thread) with `profiler.layer_profiler`, then times, in the same process, a stage of K decoder
blocks the way profiler.run_plan's PipelineStage computes it (thread CPU time, median of R
rounds, the three kinds interleaved round by round):
- 1F1B: forward, then torch's `stage_backward` (full backward);
- ZB-V: forward, then `stage_backward_input` and `stage_backward_weight` (split backward);
- full recompute: the blocks inside torch's `checkpoint_wrapper` (profiler.models.
  set_recompute), forward, then `stage_backward`.
and prints runner / profile for each, with the profile's prediction of the stage
(K x the decoder's times) the way the cost model adds them up (docs/cost-model.md, §2):
before = F + I + W (I + W = B) and F + B + fw for full recompute (the profile before
split_bw_* and the measured recompute_s.full); after = F + split I + split W and
F + B + recompute_s.full. PipelineStage's per-action bookkeeping (action_overhead_s) is in
neither side. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fidelity_cpu import ARCH, MBS, SEQ, profile  # noqa: E402
from profiler.models import build_model, set_recompute  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=2, help="decoder blocks in the stage")
    p.add_argument("--rounds", type=int, default=30)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    prof = profile(repeats=10)
    dec = prof.points[0].kinds["decoder"]
    k = a.blocks
    fw, i, w = dec.fw_s, dec.bw_input_s, dec.bw_weight_s
    si, sw = dec.split_costs()
    pred = {
        "1f1b": (k * (fw + i + w), k * (fw + i + w)),
        "zbv": (k * (fw + i + w), k * (fw + si + sw)),
        "full": (k * (2 * fw + i + w), k * (fw + i + w + dec.recompute_s.full)),
    }

    model = build_model(ARCH, seq_length=SEQ, seed=0)
    blocks = list(model.layers)[:k]
    plain = nn.Sequential(*blocks)
    ckpt = nn.Sequential(*[set_recompute(b, "full") for b in blocks])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        x0 = model.embedding(torch.randint(ARCH.vocab_size, (MBS, SEQ), generator=gen))
    grad = torch.randn(x0.shape, generator=gen)
    clock = time.thread_time

    def full(mod: nn.Module) -> float:
        x = x0.detach().requires_grad_(True)
        t0 = clock()
        stage_backward(mod(x), grad, [x])
        return clock() - t0

    def split() -> float:
        x = x0.detach().requires_grad_(True)
        params = list(plain.parameters())
        t0 = clock()
        _, groups = stage_backward_input([plain(x)], [grad], [x], iter(params))
        stage_backward_weight(iter(params), groups)
        return clock() - t0

    samples: dict[str, list[float]] = {"1f1b": [], "zbv": [], "full": []}
    for r in range(a.rounds + 3):
        t = {"1f1b": full(plain), "zbv": split(), "full": full(ckpt)}
        if r >= 3:
            for key, v in t.items():
                samples[key].append(v)
    print(
        f"stage of {k} decoder blocks (h {ARCH.hidden_size}, s {SEQ}, mbs {MBS}), one thread; "
        f"decoder profile ms: F {fw * 1e3:.3f}, I {i * 1e3:.3f}, W {w * 1e3:.3f}, "
        f"split I {si * 1e3:.3f}, split W {sw * 1e3:.3f}, recompute full "
        f"{dec.recompute_s.full * 1e3:.3f}"
    )
    print("kind   runner CPU ms  profile before  runner/before  profile after  runner/after")
    for key, (before, after) in pred.items():
        m = statistics.median(samples[key])
        print(
            f"{key:6s} {m * 1e3:13.3f} {before * 1e3:15.3f} {m / before:14.3f} "
            f"{after * 1e3:14.3f} {m / after:13.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
