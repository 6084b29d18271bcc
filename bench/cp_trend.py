"""Split torchtitan's 8B CP scaling (Table 2) into a per-token part that does not grow with the
sequence and one that grows as attention does, measured against predicted.

python bench/cp_trend.py

At local batch 1 and cp = s / 32K, a GPU's time per token is A + B s: A the linear layers,
norms and FSDP (the same at every point), B s the attention core, whose work per token grows
linearly with s (each query attends s / 2 keys on average), with the ring's per-step terms.
The bench prints, per point, the measured and predicted microseconds per token and the step
from the previous point; then the least-squares (A, B) of the prediction, and the range of B
for which some A >= 0 puts all four points within 15 % of the published tokens/s. Analysis
only: nothing here feeds the cost model.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.moe_cp_published import load, torchtitan

TOLERANCE = 0.15
CASE = "torchtitan-llama3.1-8b-cp-scaling"


def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b /= sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def _feasible(seqs: list[float], rates: list[float], tol: float) -> list[tuple[float, float]]:
    """(B, A range midpoint) for each B (s per token per token, on a fine grid) for which an
    A >= 0 keeps A + B s within tol of every published rate."""
    lo = [1.0 / ((1.0 + tol) * r) for r in rates]
    hi = [1.0 / ((1.0 - tol) * r) for r in rates]
    found: list[tuple[float, float]] = []
    top = min(hi) / min(seqs)
    steps = 20000
    for k in range(steps + 1):
        b = top * k / steps
        a_min = max(0.0, *(low - b * s for low, s in zip(lo, seqs, strict=True)))
        a_max = min(high - b * s for high, s in zip(hi, seqs, strict=True))
        if a_min <= a_max:
            found.append((b, (a_min + a_max) / 2.0))
    return found


def main() -> int:
    doc = load()
    case = next(c for c in doc["cases"] if c["name"] == CASE)
    rows = torchtitan(doc, case)
    seqs = [float(p["seq_length"]) for p in case["points"]]
    measured = [float(p["tokens_per_s_per_gpu"]) for p in case["points"]]
    predicted = [float(r["predicted_tokens_per_s_per_gpu"]) for r in rows]
    prev_m = prev_p = None
    print("seq      cp  measured us/tok (step)   predicted us/tok (step)")
    for p, m, q in zip(case["points"], measured, predicted, strict=True):
        um, up = 1e6 / m, 1e6 / q
        dm = "" if prev_m is None else f"(+{um - prev_m:.0f})"
        dp = "" if prev_p is None else f"(+{up - prev_p:.0f})"
        print(f"{p['seq_length']:<8} {p['cp']:<3} {um:8.1f} {dm:<12} {up:8.1f} {dp}")
        prev_m, prev_p = um, up
    a, b = _least_squares(seqs, [1.0 / q for q in predicted])
    print(f"predicted: A = {a * 1e6:.1f} us/token, B = {b * 1e9:.2f} ns/token^2")
    span = _feasible(seqs, measured, TOLERANCE)
    if not span:
        print(f"no A + B s puts every point within {TOLERANCE:.0%}")
    else:
        (lo, a_lo), (hi, a_hi) = span[0], span[-1]
        print(
            f"within {TOLERANCE:.0%} of every point: B in [{lo * 1e9:.2f}, {hi * 1e9:.2f}]"
            f" ns/token^2 ({lo / b:.2f}-{hi / b:.2f} x the predicted B),"
            f" with A = {a_lo * 1e6:.1f}-{a_hi * 1e6:.1f} us/token"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
