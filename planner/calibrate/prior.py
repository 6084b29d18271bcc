"""The prior weight of a calibration, chosen by leave-one-out cross-validation.

The fit minimises sum_i r_i^2 + w sum_j (u_j - u0_j)^2 in u = log(constants)
(planner.calibrate.fit). For each w of PRIOR_WEIGHTS and each observation i, the fit on the
other observations is taken linearised at the start u0 (one Gauss-Newton step of ridge
regression, Hoerl & Kennard 1970):

    d_-i = -(J_-i^T J_-i + w I)^-1 J_-i^T r_-i,   clipped so that u0 + d stays in the bounds,
    e_i  = r_i + J_i d_-i                          (observation i's predicted log error)

and w's score is the mean of the e_i^2 (Stone 1974). w = inf is d = 0: the start itself.
The one-standard-error rule (Breiman et al. 1984 §3.4.3; Hastie, Tibshirani & Friedman, The
Elements of Statistical Learning, 2nd ed., §7.10) picks the largest w whose score is within
one standard error (of the mean of the e_i^2) of the smallest score: a prior is only left as
far as the observations show, beyond their own scatter, that leaving it predicts better.
Linearising keeps this at one Jacobian (k + 1 predictions of every observation); log step
time is close to linear in the log of each constant (each constant scales one kind of time),
so the linear step is close to the refit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.calibrate.linalg import normal, solve

PRIOR_WEIGHTS: tuple[float, ...] = (0.0, 0.25, 1.0, 4.0, 16.0, 64.0, 256.0, math.inf)
"""The prior weights leave-one-out cross-validation chooses from (in observations)."""


def _loo_errors(
    jac: list[list[float]],
    r: list[float],
    u0: Sequence[float],
    bounds: Sequence[tuple[float, float]],
    w: float,
) -> list[float] | None:
    """Each observation's linearised leave-one-out error under weight w (None: singular)."""
    n, k = len(r), len(u0)
    out = []
    for i in range(n):
        if math.isinf(w):
            out.append(r[i])
            continue
        rows = [row for j, row in enumerate(jac) if j != i]
        rest = [x for j, x in enumerate(r) if j != i]
        jtj, jtr = normal(rows, rest) if rows else ([[0.0] * k for _ in range(k)], [0.0] * k)
        damped = [
            [v + (w if a == b else 0.0) for b, v in enumerate(row)] for a, row in enumerate(jtj)
        ]
        try:
            step = solve(damped, [-g for g in jtr])
        except ZeroDivisionError:
            return None
        step = [
            min(math.log(hi), max(math.log(lo), u + d)) - u
            for u, d, (lo, hi) in zip(u0, step, bounds, strict=True)
        ]
        out.append(r[i] + sum(a * d for a, d in zip(jac[i], step, strict=True)))
    return out


def choose_prior_weight(
    jac: list[list[float]],
    r: list[float],
    u0: Sequence[float],
    bounds: Sequence[tuple[float, float]],
    weights: Sequence[float] = PRIOR_WEIGHTS,
) -> tuple[float, dict[float, float]]:
    """(the chosen w, every w's leave-one-out RMS log error) -- module docstring. With one
    observation there is nothing to cross-validate with: w = 0 (plain least squares)."""
    squares: dict[float, list[float]] = {}
    for w in weights:
        errors = _loo_errors(jac, r, u0, bounds, w) if len(r) > 1 else None
        if errors is not None:
            squares[w] = [e * e for e in errors]
    if len(r) < 2:
        return 0.0, {}
    if not squares:
        return math.inf, {}
    mse = {w: sum(sq) / len(sq) for w, sq in squares.items()}
    best = min(mse, key=lambda w: (mse[w], -w))
    sq = squares[best]
    n = len(sq)
    se = math.sqrt(sum((x - mse[best]) ** 2 for x in sq) / (n - 1) / n)
    chosen = max(w for w in mse if mse[w] <= mse[best] + se)
    return chosen, {w: math.sqrt(v) for w, v in mse.items()}
