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
With `hold_undetermined` such a constant is held at its start value instead (FitResult.held
says which and why) and the others are fitted.

The prior (ridge regression in log space, Hoerl & Kennard 1970; the MAP estimate under a
normal prior on log c centred at the start constants): minimise
    sum_i r_i^2 + w * sum_j (log c_j - log c0_j)^2,
so the prior counts as w observations that each move log step time one-for-one with log c_j.
The start constants are the shipped calibration (planner/catalog/efficiency.py), itself fitted
on measured runs, so a few new observations should move it only as far as they predict better
than it. w is not a tuned number: it is chosen from PRIOR_WEIGHTS by leave-one-out
cross-validation over the observations being fitted (Stone 1974; no other data;
planner.calibrate.prior). w = inf holds every constant at its start: the observations
do not predict one another better than the start does, and the fit says so (FitResult.held).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from planner.calibrate.linalg import inverse, normal, solve
from planner.calibrate.prior import choose_prior_weight
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
    prior_weight: float = 0.0  # w of the module docstring (inf: all held at the start)
    held: dict[str, str] = field(default_factory=dict)  # constant -> why it kept its start
    loo_rms: dict[float, float] = field(default_factory=dict)  # w -> leave-one-out RMS log error


Predict = Callable[[Efficiency], Sequence[float]]  # constants -> predicted step time per row


def _residuals(predict: Predict, eff: Efficiency, measured: Sequence[float]) -> list[float]:
    return [math.log(p / m) for p, m in zip(predict(eff), measured, strict=True)]


def _with(eff: Efficiency, names: Sequence[str], u: Sequence[float]) -> Efficiency:
    values = {}
    for name, x in zip(names, u, strict=True):
        lo, hi = BOUNDS[name]
        # clipped in log space first: a huge step cannot overflow exp()
        values[name] = lo if x <= math.log(lo) else hi if x >= math.log(hi) else math.exp(x)
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


def undetermined(
    names: Sequence[str], jac: list[list[float]], r: list[float]
) -> tuple[str, str] | None:
    """The first constant the observations cannot determine and why (module docstring), or
    None: one they do not exercise first, then (more constants than observations) the least
    sensitive one."""
    n, k = len(r), len(names)
    sensitivity = [max(abs(row[j]) for row in jac) for j in range(k)]
    for j, name in enumerate(names):
        effect = sensitivity[j] * 0.01
        if effect < MIN_SENSITIVITY:
            return name, (
                f"{name} is not determined: a 1 % change moves no observation's predicted step "
                f"time by more than {effect:.2e} (log); the observations do not exercise it"
            )
    if n < k:
        worst = min(range(k), key=lambda j: sensitivity[j])
        return names[worst], (
            f"{n} observation(s) cannot determine {k} constants ({', '.join(names)}); "
            "fit fewer constants (--fit) or add observations"
        )
    jtj, _ = normal(jac, r)
    try:
        cov = inverse(jtj)
    except ZeroDivisionError:
        return names[-1], (
            f"the constants {', '.join(names)} are not separately determined (singular fit)"
        )
    for a in range(k):
        for b in range(a + 1, k):
            corr = cov[a][b] / math.sqrt(abs(cov[a][a] * cov[b][b]))
            if abs(corr) > MAX_CORRELATION:
                return names[b], (
                    f"{names[a]} and {names[b]} are not separately determined by these "
                    f"observations (correlation {corr:+.4f}); fit one of them"
                )
    return _loose(names, jac, r, cov)


def _loose(
    names: Sequence[str], jac: list[list[float]], r: list[float], cov: list[list[float]]
) -> tuple[str, str] | None:
    """The constant whose least-squares standard error (linearised at the start, without the
    prior: what the observations alone say) exceeds MAX_LOG_SE, the loosest first."""
    n, k = len(r), len(names)
    if n <= k:
        return None
    _, jtr = normal(jac, r)
    step = [-sum(cov[a][b] * jtr[b] for b in range(k)) for a in range(k)]
    rss = sum(
        (ri + sum(x * d for x, d in zip(row, step, strict=True))) ** 2
        for row, ri in zip(jac, r, strict=True)
    )
    s2 = rss / (n - k)
    se = [math.sqrt(max(0.0, s2 * cov[j][j])) for j in range(k)]
    worst = max(range(k), key=lambda j: se[j])
    if se[worst] <= MAX_LOG_SE:
        return None
    return names[worst], (
        f"{names[worst]} is not determined by these observations: their least-squares fit "
        f"leaves it a standard error of {se[worst]:.2f} in log (a +-2 sigma range of a factor "
        f"{math.exp(4 * min(se[worst], 20.0)):.3g}); hold it at its default (fit fewer "
        "constants) or add observations that exercise it"
    )


def _determined(
    predict: Predict,
    eff: Efficiency,
    names: tuple[str, ...],
    measured: Sequence[float],
    hold: bool,
    held: dict[str, str],
) -> tuple[tuple[str, ...], list[float], list[list[float]]]:
    """The constants the observations determine, their residuals and Jacobian at `eff`; the
    others raise NotDetermined or (hold) go to `held` with the reason."""
    while True:
        before, jac = _jacobian(predict, eff, names, measured)
        bad = undetermined(names, jac, before)
        if bad is None:
            return names, before, jac
        if not hold:
            raise NotDetermined(bad[1])
        held[bad[0]] = bad[1]
        names = tuple(n for n in names if n != bad[0])
        if not names:
            return names, before, []


def fit_constants(
    predict: Predict,
    measured: Sequence[float],
    *,
    names: Sequence[str] = CONSTANT_NAMES,
    start: Efficiency | None = None,
    prior_weight: float | None = None,
    hold_undetermined: bool = False,
) -> FitResult:
    """Least squares on log step time over `names`, toward `start` with the prior weight
    (None: chosen by leave-one-out cross-validation; 0: plain least squares) -- module
    docstring.

    `predict(constants)` returns one predicted step time per observation, in `measured`'s order.
    Raises NotDetermined when a constant cannot be determined (unless `hold_undetermined`:
    then it keeps its start value, named in FitResult.held), ValueError for bad input.
    """
    unknown = [n for n in names if n not in CONSTANT_NAMES]
    if unknown or not names:
        raise ValueError(f"constants to fit must be some of {list(CONSTANT_NAMES)}; got {names}")
    if any(not m > 0 for m in measured):
        raise ValueError("every measured step_time_s must be > 0")
    if prior_weight is not None and not prior_weight >= 0:
        raise ValueError(f"prior_weight={prior_weight} must be >= 0 (or None: cross-validated)")
    start = start if start is not None else Efficiency()
    asked = prior_weight
    held: dict[str, str] = {}
    names, before, jac = _determined(
        predict, start, tuple(names), measured, hold_undetermined, held
    )
    u0 = [math.log(getattr(start, n)) for n in names]
    loo: dict[float, float] = {}
    if prior_weight is None and names:
        prior_weight, loo = choose_prior_weight(jac, before, u0, [BOUNDS[n] for n in names])
    w = math.inf if not names else float(prior_weight or 0.0)
    if math.isinf(w):
        for name in names:
            held[name] = (
                f"{name} held at its prior {getattr(start, name):.4g}: fitted on all but one "
                "observation, no prior weight predicts the one left out better than the prior "
                "by more than one standard error (leave-one-out RMS log error "
                f"{_loo_text(loo)})"
            )
        return FitResult(start, (), {}, tuple(before), tuple(before), 0, w, held, loo)
    eff, iterations = _levenberg_marquardt(predict, start, names, measured, u0, w, before, jac)
    after, jac = _jacobian(predict, eff, names, measured)
    ranges = _ranges(eff, names, jac, after, w)
    for name, (lo, hi) in ranges.items():
        if math.log(hi / lo) > 4 * MAX_LOG_SE:
            message = (
                f"{name} is not determined by these observations: it fits to "
                f"{getattr(eff, name):.4g} with a +-2 sigma range {lo:.3g} .. {hi:.3g}; "
                "hold it at its default (fit fewer constants) or add observations that exercise it"
            )
            if not hold_undetermined:
                raise NotDetermined(message)
            held[name] = message
            rest = [n for n in names if n != name]
            if not rest:
                return FitResult(start, (), {}, tuple(before), tuple(before), 0, w, held, loo)
            sub = fit_constants(
                predict,
                measured,
                names=rest,
                start=start,
                prior_weight=asked,
                hold_undetermined=True,
            )
            return replace(sub, held={**held, **sub.held})
    return FitResult(eff, names, ranges, tuple(before), tuple(after), iterations, w, held, loo)


def _loo_text(loo: dict[float, float]) -> str:
    return ", ".join(f"w={w:g}: {e:.4f}" for w, e in loo.items())


def _levenberg_marquardt(
    predict: Predict,
    eff: Efficiency,
    names: tuple[str, ...],
    measured: Sequence[float],
    u0: list[float],
    w: float,
    r: list[float],
    jac: list[list[float]],
) -> tuple[Efficiency, int]:
    """Minimise sum r_i^2 + w sum (u_j - u0_j)^2 from `eff` (residuals r, Jacobian jac there)."""
    sw = math.sqrt(w)
    k = len(names)

    def augment(res: list[float], e: Efficiency) -> list[float]:
        u = [math.log(getattr(e, n)) for n in names]
        return [*res, *(sw * (a - b) for a, b in zip(u, u0, strict=True))]

    def augment_jac(j: list[list[float]]) -> list[list[float]]:
        return [*j, *([sw if a == b else 0.0 for b in range(k)] for a in range(k))]

    lam = 1e-3
    iterations = 0
    ra, ja = augment(r, eff), augment_jac(jac)
    for iterations in range(1, MAX_ITERATIONS + 1):  # noqa: B007 (reported)
        jtj, jtr = normal(ja, ra)
        rss = sum(x * x for x in ra)
        improved = False
        while lam < 1e12:
            damped = [
                [v * (1 + lam) if a == b else v for b, v in enumerate(row)]
                for a, row in enumerate(jtj)
            ]
            try:
                step = solve(damped, [-g for g in jtr])
            except ZeroDivisionError:
                lam *= 10
                continue
            u = [math.log(getattr(eff, n)) + s for n, s in zip(names, step, strict=True)]
            trial = _with(eff, names, u)
            r_trial = augment(_residuals(predict, trial, measured), trial)
            if sum(x * x for x in r_trial) < rss:
                eff, lam, improved = trial, max(lam / 10, 1e-9), True
                break
            lam *= 10
        if not improved:
            break
        r, jac = _jacobian(predict, eff, names, measured)
        ra, ja = augment(r, eff), augment_jac(jac)
        if rss - sum(x * x for x in ra) < 1e-14:
            break
    return eff, iterations


def _ranges(
    eff: Efficiency, names: Sequence[str], jac: list[list[float]], r: list[float], w: float
) -> dict[str, tuple[float, float]]:
    """+-2 sigma from s^2 (J^T J + w I)^-1, s^2 = RSS / (n - k) (module docstring)."""
    n, k = len(r), len(names)
    if n <= k:
        return {}
    s2 = sum(x * x for x in r) / (n - k)
    jtj, _ = normal(jac, r)
    jtj = [[v + (w if a == b else 0.0) for b, v in enumerate(row)] for a, row in enumerate(jtj)]
    try:
        cov = inverse(jtj)
    except ZeroDivisionError:
        return {}
    out = {}
    for j, name in enumerate(names):
        se = min(20.0, math.sqrt(max(0.0, s2 * cov[j][j])))  # capped: exp() stays finite
        value = getattr(eff, name)
        out[name] = (value * math.exp(-2 * se), value * math.exp(2 * se))
    return out
