"""Small dense least squares in pure Python: QR least squares and the one NNLS solver.

Matrices are lists of *columns* (each a list of m floats): the fits here have a handful of
coefficients and at most a few thousand samples, so clarity beats speed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

Columns = Sequence[Sequence[float]]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def _qr(columns: Columns, rel_tol: float = 1e-10) -> tuple[list[list[float]], list[list[float]],
                                                           list[int]]:
    """Modified Gram-Schmidt with one re-orthogonalisation pass.

    Returns (Q columns, R rows as dense upper-triangular, indices of columns that are
    numerically dependent on the previous ones; those get a zero Q column)."""
    n = len(columns)
    q: list[list[float]] = []
    r = [[0.0] * n for _ in range(n)]
    dependent: list[int] = []
    for j, col in enumerate(columns):
        v = [float(x) for x in col]
        norm0 = math.sqrt(_dot(v, v))
        for _ in range(2):
            for i, qi in enumerate(q):
                if not qi:
                    continue
                c = _dot(qi, v)
                r[i][j] += c
                v = [x - c * y for x, y in zip(v, qi, strict=True)]
        norm = math.sqrt(_dot(v, v))
        if norm0 == 0.0 or norm <= rel_tol * norm0:
            dependent.append(j)
            q.append([])
            continue
        r[j][j] = norm
        q.append([x / norm for x in v])
    return q, r, dependent


def dependent_columns(columns: Columns, rel_tol: float = 1e-8) -> list[int]:
    """Indices of columns that are (numerically) linear combinations of earlier columns,
    after scaling every column to unit norm. An all-zero column counts as dependent."""
    scaled = []
    for col in columns:
        norm = math.sqrt(_dot(col, col))
        scaled.append([x / norm for x in col] if norm > 0 else [0.0] * len(col))
    return _qr(scaled, rel_tol)[2]


def lstsq(columns: Columns, b: Sequence[float]) -> list[float]:
    """Unconstrained least squares ``min ||A x - b||`` (A given by columns, full rank).

    Dependent columns get coefficient 0 (callers reject rank-deficient problems first)."""
    n = len(columns)
    if n == 0:
        return []
    q, r, dependent = _qr(columns)
    qtb = [_dot(qi, b) if qi else 0.0 for qi in q]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        if i in dependent:
            continue
        s = qtb[i] - math.fsum(r[i][k] * x[k] for k in range(i + 1, n))
        x[i] = s / r[i][i]
    return x


def nnls_normal(gram: Sequence[Sequence[float]], rhs: Sequence[float]) -> list[float] | None:
    """Non-negative least squares from the normal equations: ``min x'Gx - 2 x'r`` subject to
    ``x >= 0``, for ``G = A'A`` and ``r = A'b`` (which is all a discounted running fit keeps).

    Exact: every support (subset of coefficients left free) is solved and the feasible one
    with the least residual wins; on a tie the larger support, found first, is kept. The
    models here have a handful of coefficients, so the 2^n supports are cheap. None when no
    support has a non-singular system (no data)."""
    n = len(rhs)
    best: tuple[float, list[float]] | None = None
    for size in range(n, 0, -1):
        for support in itertools.combinations(range(n), size):
            a = [[gram[i][j] for j in support] for i in support]
            y = [rhs[i] for i in support]
            sol = _solve_symmetric(a, y)
            if sol is None or min(sol) < 0.0:
                continue
            # residual sum of squares up to a constant: x'Gx - 2 x'r
            obj = sum(sol[i] * a[i][j] * sol[j] for i in range(size)
                      for j in range(size)) - 2.0 * sum(u * v for u, v in zip(sol, y, strict=True))
            if best is None or obj < best[0]:
                coef = [0.0] * n
                for k, idx in enumerate(support):
                    coef[idx] = sol[k]
                best = (obj, coef)
    return best[1] if best is not None else None


def _solve_symmetric(a: list[list[float]], y: list[float]) -> list[float] | None:
    """Solve a small symmetric system after diagonal scaling; None when (near) singular."""
    k = len(a)
    scale = [a[i][i] ** 0.5 if a[i][i] > 0 else 0.0 for i in range(k)]
    if min(scale) <= 0.0:
        return None
    m = [[a[i][j] / (scale[i] * scale[j]) for j in range(k)] + [y[i] / scale[i]]
         for i in range(k)]
    for col in range(k):
        piv = max(range(col, k), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-9:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(k):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, k + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][k] / m[i][i] / scale[i] for i in range(k)]


def nnls(columns: Columns, b: Sequence[float]) -> list[float]:
    """Non-negative least squares ``min ||A x - b||`` subject to ``x >= 0`` (A by columns),
    through :func:`nnls_normal`. Columns are scaled to unit norm first, so coefficients of very
    different magnitude (seconds per token, seconds per step) stay well conditioned."""
    n = len(columns)
    if n == 0:
        return []
    m = len(b)
    scales: list[float] = []
    cols: list[list[float]] = []
    for col in columns:
        if len(col) != m:
            raise ValueError(f"column length {len(col)} != {m} rows")
        norm = math.sqrt(_dot(col, col))
        scales.append(norm if norm > 0 else 1.0)
        cols.append([x / scales[-1] for x in col])
    gram = [[_dot(ci, cj) for cj in cols] for ci in cols]
    x = nnls_normal(gram, [_dot(c, b) for c in cols]) or [0.0] * n
    return [xi / sc for xi, sc in zip(x, scales, strict=True)]
