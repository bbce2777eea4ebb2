"""How noisy a step time is and how fast the machine's load moves, measured from the steps.

A measured step interval is ``load(t) * cost(arm)`` times noise. The load (other processes,
clock scaling, a neighbour on a shared core, context growth, the batch drifting inside its
bucket) is common to every arm and moves over tens of steps. The cost posterior
(cost_posterior.py) follows it as a random-walk level; this module measures, rather than
assumes, the two numbers that filter needs (DriftEstimator, a variogram of the played arm) and
tells outliers of a well-known arm apart (outlier_side: a lone one is a stall, two in a row
are a load shift).
"""

from __future__ import annotations

from collections import deque

# Measurement-noise floor (log-time variance): 1% jitter; below that the filter would trust
# every sample completely.
_R_MIN = 1e-4
# Variogram: lag (steps) of the long difference, EWMA weight floor, samples before it is used,
# and the range the learned level drift (units of r) is kept in.
_LAG = 8
_VARIO_RATE = 0.02
_VARIO_READY = 24
_DRIFT_MIN = 0.01
_DRIFT_MAX = 16.0


class DriftEstimator:
    """How noisy is one step, and how fast does the load move? Read off the played arm.

    While one arm is played, its log step times are ``level + mu + noise``: differences at lag
    1 have variance ``2r + q``, at lag k ``2r + k q`` (``q``: the level's random-walk variance
    per step). Two discounted mean squares of differences therefore give both the noise ``r``
    and the drift ``q / r`` the filter needs -- on a steady GPU host the drift comes out near 0
    and arms are averaged over many steps; on a shared CPU whose load wanders it comes out
    large and the level follows the machine. Differences are taken only within one run of one
    arm (a switch restarts the history), and squared differences far above the current
    estimate (stalls) are clipped.
    """

    __slots__ = ("_arm", "_hist", "n_long", "n_short", "v_long", "v_short")

    def __init__(self) -> None:
        self._arm: object | None = None
        self._hist: deque[float] = deque(maxlen=_LAG)
        self.v_short = 0.0
        self.v_long = 0.0
        self.n_short = 0
        self.n_long = 0

    def observe(self, arm: object, y: float) -> None:
        """One clean log step time ``y`` of ``arm``."""
        h = self._hist
        if arm is not self._arm:
            self._arm = arm
            h.clear()
        if h:
            self.n_short += 1
            self.v_short = _mean_square(self.v_short, y - h[-1], self.n_short)
        if len(h) == _LAG:
            self.n_long += 1
            self.v_long = _mean_square(self.v_long, y - h[0], self.n_long)
        h.append(y)

    def estimate(self) -> tuple[float, float] | None:
        """``(r, q / r)`` once enough runs were seen, else None."""
        if self.n_long < _VARIO_READY:
            return None
        q = max((self.v_long - self.v_short) / (_LAG - 1), 0.0)
        r = max((self.v_short - q) / 2.0, _R_MIN)
        return r, min(max(q / r, _DRIFT_MIN), _DRIFT_MAX)


def _mean_square(v: float, d: float, n: int) -> float:
    """Discounted mean of ``d * d`` (plain mean for the first samples; stalls clipped)."""
    sq = d * d
    if n > _LAG and sq > 16.0 * v:
        sq = 16.0 * v
    return v + max(_VARIO_RATE, 1.0 / n) * (sq - v)


def outlier_side(surprise: float, bound: float, precise: bool, previous: int) -> tuple[int, bool]:
    """Classify one log-time surprise: ``(side, shifted)``. ``side`` is +1 / -1 when a
    precise prediction (one at least as certain as the load level) is missed by more than
    ``bound``, else 0; ``shifted`` when it is the second such miss in a row on the same side:
    a load shift, to be re-anchored on at once, where a single miss is a stall, clipped."""
    side = 0
    if precise:
        side = 1 if surprise > bound else -1 if surprise < -bound else 0
    return side, side != 0 and side == previous
