"""Global step-time model learned from every steady step: T = a + b*B*(1+g) + d*g.

Per-bucket windows say what each arm costs, but a bucket spans a 2x range of batch sizes and
an arm measured while the batch was 140 cannot be compared with one measured at 230 without
knowing how time grows with the verify width ``B * (1 + g)``. This model, fitted over all
buckets (plenty of batch variation), supplies that slope and a fallback cost shape for arms
that no bucket has measured. Sufficient statistics are discounted (half-life in samples) and
the 3-coefficient non-negative fit is redone every ``refit_every`` samples by trying every
subset of coefficients (exact NNLS for three variables).
"""

from __future__ import annotations

from .nnls import nnls_normal


class GlobalCost:
    """Discounted non-negative least squares of step time on (1, B*(1+g), g)."""

    __slots__ = ("_coef", "_decay", "_m", "_r", "_refit_every", "_since", "samples")

    def __init__(self, halflife: float = 1024.0, refit_every: int = 32) -> None:
        self._decay = 0.5 ** (1.0 / halflife)
        self._refit_every = refit_every
        self._m = [0.0] * 6  # n, sv, sg, svv, svg, sgg
        self._r = [0.0] * 3  # st, svt, sgt
        self._coef: tuple[float, float, float] | None = None
        self._since = 0
        self.samples = 0

    def add(self, batch: int, gamma: int, seconds: float) -> None:
        """Fold in one steady step (O(1))."""
        d = self._decay
        v = float(batch * (1 + gamma))
        g = float(gamma)
        m = self._m
        r = self._r
        m[0] = m[0] * d + 1.0
        m[1] = m[1] * d + v
        m[2] = m[2] * d + g
        m[3] = m[3] * d + v * v
        m[4] = m[4] * d + v * g
        m[5] = m[5] * d + g * g
        r[0] = r[0] * d + seconds
        r[1] = r[1] * d + v * seconds
        r[2] = r[2] * d + g * seconds
        self.samples += 1
        self._since += 1

    def coefficients(self) -> tuple[float, float, float] | None:
        """(a, b, d) >= 0, or None before there is data to fit."""
        if self.samples < 4:
            return None
        if self._coef is None or self._since >= self._refit_every:
            self._coef = self._fit()
            self._since = 0
        return self._coef

    def per_token(self) -> float:
        """Seconds per verified token (b), 0 when unknown."""
        c = self.coefficients()
        return c[1] if c is not None else 0.0

    def predict(self, batch: int, gamma: int) -> float | None:
        """Model step time, or None before there is data."""
        c = self.coefficients()
        if c is None:
            return None
        t = c[0] + c[1] * batch * (1 + gamma) + c[2] * gamma
        return t if t > 0 else None

    def _fit(self) -> tuple[float, float, float] | None:
        n, sv, sg, svv, svg, sgg = self._m
        c = nnls_normal([[n, sv, sg], [sv, svv, svg], [sg, svg, sgg]], self._r)
        return (c[0], c[1], c[2]) if c is not None else None


