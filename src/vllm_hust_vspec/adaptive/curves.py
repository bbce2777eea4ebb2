"""Step-time curves over the gamma arms: filling arms a bucket has not measured.

Used by the online controller (adaptive/online.py) to estimate ``T(g)`` for arms it has not
played in a bucket, from another bucket's curve or a line through the measured arms, kept
physically plausible.
"""

from __future__ import annotations


def scaled(
    value: float, own: list[float | None], shape: list[float | None], anchors: list[int], i: int
) -> float | None:
    """``value`` (from another curve) scaled to this bucket through the nearest anchor arm."""
    usable = [j for j in anchors if own[j] is not None and shape[j] is not None]
    if not usable:
        return value
    j = min(usable, key=lambda a: abs(a - i))
    ref_t = own[j]
    ref_s = shape[j]
    assert ref_t is not None and ref_s is not None
    return ref_t * value / ref_s if ref_s > 0 else None


def linear_fill(times: list[float | None]) -> list[float | None]:
    """Fill unmeasured arms with a least-squares line T = a + s*i (s >= 0) through the
    measured ones (needs two measured arms)."""
    pts = [(float(i), t) for i, t in enumerate(times) if t is not None]
    if len(pts) < 2:
        return list(times)
    n = float(len(pts))
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else 0.0
    slope = max(slope, 0.0)  # drafting more never makes a step cheaper
    base = my - slope * mx
    return [t if t is not None else max(base + slope * i, 1e-12) for i, t in enumerate(times)]


def bound(
    value: float | None, own: list[float | None], measured: list[int], i: int, gamma0: int
) -> float | None:
    """Clamp an estimated step time for arm ``i`` against the nearest measured arm ``j``.

    Step time is affine in the verify width ``1 + gamma`` with non-negative intercept and
    slope, so ``T(i) / T(j)`` lies between 1 and ``(1 + g_i) / (1 + g_j)``. Extrapolating a
    noisy line (or a neighbour's shape) outside that range would invent arms that are
    impossibly cheap or expensive."""
    if value is None or not measured:
        return value
    j = min(measured, key=lambda a: abs(a - i))
    ref = own[j]
    if ref is None:
        return value
    ratio = (gamma0 + i + 1) / (gamma0 + j + 1)
    lo, hi = (ref * ratio, ref) if i < j else (ref, ref * ratio)
    return min(max(value, lo), hi)
