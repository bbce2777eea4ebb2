"""Small dense least squares in pure Python: QR least squares and Lawson-Hanson NNLS.

Matrices are lists of *columns* (each a list of m floats): the fits here have a handful of
coefficients and at most a few thousand samples, so clarity beats speed.
"""

from __future__ import annotations

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


def nnls(columns: Columns, b: Sequence[float], max_iter: int | None = None) -> list[float]:
    """Lawson-Hanson non-negative least squares: ``min ||A x - b||`` subject to ``x >= 0``.

    Columns are scaled to unit norm internally (coefficients of very different magnitude,
    e.g. seconds per token and seconds per step, stay well conditioned)."""
    n = len(columns)
    if n == 0:
        return []
    m = len(b)
    scales = []
    cols: list[list[float]] = []
    for col in columns:
        if len(col) != m:
            raise ValueError(f"column length {len(col)} != {m} rows")
        norm = math.sqrt(_dot(col, col))
        scales.append(norm if norm > 0 else 1.0)
        cols.append([x / scales[-1] for x in col])
    bnorm = math.sqrt(_dot(b, b))
    tol = 1e-12 * max(bnorm, 1e-300) * max(m, n)
    x = [0.0] * n
    passive: list[int] = []
    limit = max_iter if max_iter is not None else 30 * n

    def gradient(xv: list[float]) -> list[float]:
        resid = [bi - math.fsum(cols[j][i] * xv[j] for j in range(n) if xv[j])
                 for i, bi in enumerate(b)]
        return [_dot(c, resid) for c in cols]

    w = gradient(x)
    it = 0
    while it < limit:
        candidates = [j for j in range(n) if j not in passive and w[j] > tol]
        if not candidates:
            break
        t = max(candidates, key=w.__getitem__)
        passive.append(t)
        while True:
            it += 1
            sub = lstsq([cols[j] for j in passive], b)
            s = [0.0] * n
            for j, v in zip(passive, sub, strict=True):
                s[j] = v
            if all(s[j] > 0 for j in passive):
                break
            if it >= limit:
                break
            alpha = min(x[j] / (x[j] - s[j]) for j in passive if s[j] <= 0)
            x = [xi + alpha * (si - xi) for xi, si in zip(x, s, strict=True)]
            passive = [j for j in passive if x[j] > 1e-15]
            if not passive:
                s = [0.0] * n
                break
        x = [max(v, 0.0) for v in s]
        w = gradient(x)
    return [xi / sc for xi, sc in zip(x, scales, strict=True)]
