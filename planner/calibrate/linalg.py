"""Small dense linear algebra for the fit (a handful of constants: no numpy in the core)."""

from __future__ import annotations


def solve(a: list[list[float]], b: list[float]) -> list[float]:
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


def inverse(a: list[list[float]]) -> list[list[float]]:
    n = len(a)
    cols = [solve(a, [1.0 if i == j else 0.0 for i in range(n)]) for j in range(n)]
    return [[cols[j][i] for j in range(n)] for i in range(n)]


def normal(jac: list[list[float]], r: list[float]) -> tuple[list[list[float]], list[float]]:
    k = len(jac[0])
    jtj = [[sum(row[a] * row[b] for row in jac) for b in range(k)] for a in range(k)]
    jtr = [sum(row[a] * ri for row, ri in zip(jac, r, strict=True)) for a in range(k)]
    return jtj, jtr
