"""The terms of the step-cost model (adaptive/cost_posterior.py): where each sits in the
state, its prior, the physical bounds, and the small numerics that read them."""

from __future__ import annotations

import math
from operator import mul

# The state ``z``: the level, the host's admission terms (shared by every bucket: a mixed step
# leaves the graphs whatever the batch), then the active bucket's terms.
LEVEL, ADMISSION, PROMPT, ADMITTING_PASS, VERIFIED_TOKEN = 0, 1, 2, 3, 4
ADMITTING_DEV = 5  # o_g at ADMITTING_DEV + g - 1 (g = 1..max_gamma); then the bucket's
TARGET, INCREMENT, OVERHEAD, ZERO_PASS = range(4)  # bucket terms, offsets after the global ones
STEADY_DEV = 4  # s_g at bucket offset STEADY_DEV + g - 1
BUCKET_NAMES = ("a", "d", "delta", "z")
# Prior means and standard deviations in units of tau (delta's sd is a knob): a step costs
# ~tau, a draft increment ~0.1 tau, the data moves them within a few steps. z is tight: an
# arm that is rarely played (a drafter-running zero where speculation pays) must not be
# drawn cheaper than a target-only step. An admission's fixed cost is wide (an Ascend mixed
# step costs several decode steps); a depth's deviation is tight, so played arms teach the
# affine part and only a far miss (below) or a consistent misfit becomes a deviation. An
# admitting depth's deviation is half a step: where most steps admit (a large batch), a
# wider one made every depth's admitting cost unknown until visited, and a mixed step that
# leaves the graphs is a far miss that opens its term anyway.
BUCKET_PRIOR = ((0.5, 0.5), (0.1, 0.2), (0.0, 0.0), (0.1, 0.1))
GLOBAL_PRIOR = ((0.0, 2.0), (0.0, 1.0), (0.0, 2.0), (0.05, 0.2))  # m, c, w, u
STEADY_DEVIATION_SD = 0.003
ADMITTING_DEVIATION_SD = 0.5
F_MIN = 1e-3  # predicted costs are kept positive (units of tau)
A_MIN = 0.01  # smallest target-only step (units of tau)
TOKEN_UNIT = 64.0  # tokens per unit of the prompt and verified-token features
LEVEL_VAR0 = 1.0  # log^2: the level is unknown until the first samples
Row = tuple[tuple[int, float], ...]  # sparse regression row: (index in z, feature)
Bounds = tuple[tuple[tuple[tuple[int, float], ...], float], ...]  # sum(coef * z) >= lo




def price(theta: list[float], rows: list[Row]) -> list[float]:
    """``f`` of each row under coefficients ``theta`` (kept positive)."""
    return [max(sum(theta[i] * v for i, v in x), F_MIN) for x in rows]


def feasible_step(bounds: Bounds, m: list[float], dm: list[float]) -> float:
    """Largest share (<= 1) of the move ``dm`` from ``m`` that keeps every bound."""
    step = 1.0
    for terms, lo in bounds:
        now = sum(m[i] * c for i, c in terms)
        move = sum(dm[i] * c for i, c in terms)
        if move < 0.0 and now + move < lo:
            room = (now - lo) / -move if now > lo else 0.0
            if room < step:
                step = room
    return step


def cholesky_rows(p: list[list[float]]) -> tuple[tuple[float, ...], ...]:
    """Rows of the lower Cholesky factor of a covariance (row ``i`` has ``i + 1`` entries);
    non-positive pivots (a direction the data pinned to rounding error) give a zero column."""
    n = len(p)
    out = [[0.0] * (i + 1) for i in range(n)]
    for i in range(n):
        row = out[i]
        for j in range(i + 1):
            other = out[j]
            acc = p[i][j] - sum(map(mul, row[:j], other[:j]))
            if i == j:
                row[i] = math.sqrt(acc) if acc > 1e-12 else 0.0
            else:
                d = other[j]
                row[j] = acc / d if d > 0.0 else 0.0
    return tuple(tuple(r) for r in out)


__all__ = ["ADMISSION", "ADMITTING_DEV", "ADMITTING_DEVIATION_SD", "ADMITTING_PASS", "A_MIN",
           "BUCKET_NAMES", "BUCKET_PRIOR", "F_MIN", "GLOBAL_PRIOR", "INCREMENT", "LEVEL",
           "LEVEL_VAR0", "OVERHEAD", "PROMPT", "STEADY_DEV", "STEADY_DEVIATION_SD", "TARGET",
           "TOKEN_UNIT", "VERIFIED_TOKEN", "ZERO_PASS", "Bounds", "Row", "cholesky_rows",
           "feasible_step", "price"]
