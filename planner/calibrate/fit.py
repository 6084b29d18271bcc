"""Fit the cost model's calibrated constants to measured step times (least squares on log time).

Residual of observation i: r_i = log(predicted_i(c)) - log(measured_i), where c are the
constants being fitted (planner.catalog.efficiency.CONSTANT_NAMES, a subset of them) and every
other constant keeps its start value. Minimise sum r_i^2 by Levenberg-Marquardt (Levenberg
1944; Marquardt 1963) in u = log(c) (so every constant stays positive and steps are relative),
with the Jacobian J_ij = d r_i / d u_j by forward differences, and each step clipped to the
constants' bounds.

Ranges: the linearised standard error of u_j, s_j = sqrt(s^2 [(J^T J)^-1]_jj) with
s^2 = RSS / (n - k), reported as c_j * exp(+-2 s_j) (about 95 %); with n = k there is no
residual to estimate s^2 from and no range is given.

A constant is *not determined* -- the fit refuses, naming it -- when
- there are fewer observations than fitted constants;
- changing it by 1 % moves no observation's log step time by more than MIN_SENSITIVITY; or
- it is confounded with another fitted constant: |correlation| of their estimates above
  MAX_CORRELATION (the observations only fix a combination of the two); or
- after the fit, its standard error in log space exceeds MAX_LOG_SE (its +-2 s range spans
  more than a factor e^4 = 55: the data hardly constrain it, typically a constant pushed to a
  bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from planner.catalog.efficiency import CONSTANT_NAMES, Efficiency

BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_fraction": (0.05, 1.0),
    "hbm_fraction": (0.05, 1.0),
    "kernel_overhead_s": (1e-8, 1e-3),
    "link_fraction": (0.05, 1.0),
}
MIN_SENSITIVITY = 1e-5  # d log(step) per 1 % change of a constant, on the most sensitive row
MAX_CORRELATION = 0.995
MAX_LOG_SE = 1.0
STEP = 1e-3  # forward-difference step in log(constant)
MAX_ITERATIONS = 40


class NotDetermined(ValueError):
    """The observations cannot determine a constant (the message says which and why)."""


@dataclass(frozen=True)
class FitResult:
    constants: Efficiency
    fitted: tuple[str, ...]
    ranges: dict[str, tuple[float, float]]  # empty when n == k
    residuals_before: tuple[float, ...]  # log(predicted / measured), start constants
    residuals_after: tuple[float, ...]
    iterations: int


Predict = Callable[[Efficiency], Sequence[float]]  # constants -> predicted step time per row


def _residuals(predict: Predict, eff: Efficiency, measured: Sequence[float]) -> list[float]:
    return [math.log(p / m) for p, m in zip(predict(eff), measured, strict=True)]


def _with(eff: Efficiency, names: Sequence[str], u: Sequence[float]) -> Efficiency:
    values = {}
    for name, x in zip(names, u, strict=True):
        lo, hi = BOUNDS[name]
        values[name] = min(hi, max(lo, math.exp(x)))
    return eff.replace(**values)


def _jacobian(
    predict: Predict, eff: Efficiency, names: Sequence[str], measured: Sequence[float]
) -> tuple[list[float], list[list[float]]]:
    """(residuals, J) at eff; J[i][j] = d r_i / d log(c_j), a backward step at an upper bound."""
    r0 = _residuals(predict, eff, measured)
    u = [math.log(getattr(eff, n)) for n in names]
    cols = []
    for j, name in enumerate(names):
        h = STEP if math.exp(u[j] + STEP) <= BOUNDS[name][1] else -STEP
        shifted = list(u)
        shifted[j] += h
        rj = _residuals(predict, _with(eff, names, shifted), measured)
        cols.append([(a - b) / h for a, b in zip(rj, r0, strict=True)])
    jac = [[cols[j][i] for j in range(len(names))] for i in range(len(measured))]
    return r0, jac


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a x = b (small, dense) by Gaussian elimination with partial pivoting."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            raise ZeroDivisionError("singular")
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _inverse(a: list[list[float]]) -> list[list[float]]:
    n = len(a)
    cols = [_solve(a, [1.0 if i == j else 0.0 for i in range(n)]) for j in range(n)]
    return [[cols[j][i] for j in range(n)] for i in range(n)]


def _normal(jac: list[list[float]], r: list[float]) -> tuple[list[list[float]], list[float]]:
    k = len(jac[0])
    jtj = [[sum(row[a] * row[b] for row in jac) for b in range(k)] for a in range(k)]
    jtr = [sum(row[a] * ri for row, ri in zip(jac, r, strict=True)) for a in range(k)]
    return jtj, jtr


def _check_determined(names: Sequence[str], jac: list[list[float]], n: int) -> None:
    k = len(names)
    if n < k:
        raise NotDetermined(
            f"{n} observation(s) cannot determine {k} constants ({', '.join(names)}); "
            "fit fewer constants (--fit) or add observations"
        )
    for j, name in enumerate(names):
        effect = max(abs(row[j]) for row in jac) * 0.01
        if effect < MIN_SENSITIVITY:
            raise NotDetermined(
                f"{name} is not determined: a 1 % change moves no observation's predicted step "
                f"time by more than {effect:.2e} (log); the observations do not exercise it"
            )
    jtj, _ = _normal(jac, [0.0] * n)
    try:
        cov = _inverse(jtj)
    except ZeroDivisionError:
        raise NotDetermined(
            f"the constants {', '.join(names)} are not separately determined (singular fit)"
        ) from None
    for a in range(k):
        for b in range(a + 1, k):
            corr = cov[a][b] / math.sqrt(abs(cov[a][a] * cov[b][b]))
            if abs(corr) > MAX_CORRELATION:
                raise NotDetermined(
                    f"{names[a]} and {names[b]} are not separately determined by these "
                    f"observations (correlation {corr:+.4f}); fit one of them"
                )


def fit_constants(
    predict: Predict,
    measured: Sequence[float],
    *,
    names: Sequence[str] = CONSTANT_NAMES,
    start: Efficiency | None = None,
) -> FitResult:
    """Least squares on log step time over `names` (module docstring).

    `predict(constants)` returns one predicted step time per observation, in `measured`'s order.
    Raises NotDetermined when a constant cannot be determined, ValueError for bad input.
    """
    unknown = [n for n in names if n not in CONSTANT_NAMES]
    if unknown or not names:
        raise ValueError(f"constants to fit must be some of {list(CONSTANT_NAMES)}; got {names}")
    if any(not m > 0 for m in measured):
        raise ValueError("every measured step_time_s must be > 0")
    eff = start if start is not None else Efficiency()
    names = tuple(names)
    before, jac = _jacobian(predict, eff, names, measured)
    _check_determined(names, jac, len(measured))
    r = before
    lam = 1e-3
    iterations = 0
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007 (reported)
        jtj, jtr = _normal(jac, r)
        rss = sum(x * x for x in r)
        improved = False
        while lam < 1e12:
            damped = [
                [v * (1 + lam) if a == b else v for b, v in enumerate(row)]
                for a, row in enumerate(jtj)
            ]
            try:
                step = _solve(damped, [-g for g in jtr])
            except ZeroDivisionError:
                lam *= 10
                continue
            u = [math.log(getattr(eff, n)) + s for n, s in zip(names, step, strict=True)]
            trial = _with(eff, names, u)
            r_trial = _residuals(predict, trial, measured)
            if sum(x * x for x in r_trial) < rss:
                eff, lam, improved = trial, max(lam / 10, 1e-9), True
                break
            lam *= 10
        if not improved or rss - sum(x * x for x in _residuals(predict, eff, measured)) < 1e-14:
            break
        r, jac = _jacobian(predict, eff, names, measured)
    after, jac = _jacobian(predict, eff, names, measured)
    ranges = _ranges(eff, names, jac, after)
    for name, (lo, hi) in ranges.items():
        if math.log(hi / lo) > 4 * MAX_LOG_SE:
            raise NotDetermined(
                f"{name} is not determined by these observations: it fits to "
                f"{getattr(eff, name):.4g} with a +-2 sigma range {lo:.3g} .. {hi:.3g}; "
                "hold it at its default (fit fewer constants) or add observations that exercise it"
            )
    return FitResult(
        constants=eff,
        fitted=names,
        ranges=ranges,
        residuals_before=tuple(before),
        residuals_after=tuple(after),
        iterations=iterations,
    )


def _ranges(
    eff: Efficiency, names: Sequence[str], jac: list[list[float]], r: list[float]
) -> dict[str, tuple[float, float]]:
    n, k = len(r), len(names)
    if n <= k:
        return {}
    s2 = sum(x * x for x in r) / (n - k)
    jtj, _ = _normal(jac, r)
    try:
        cov = _inverse(jtj)
    except ZeroDivisionError:
        return {}
    out = {}
    for j, name in enumerate(names):
        se = min(20.0, math.sqrt(max(0.0, s2 * cov[j][j])))  # capped: exp() stays finite
        value = getattr(eff, name)
        out[name] = (value * math.exp(-2 * se), value * math.exp(2 * se))
    return out
