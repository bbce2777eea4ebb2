"""Step times under a drifting machine load: a small Kalman filter in log time.

A measured step interval is ``load(t) * cost(arm)`` times noise. The load (other processes,
clock scaling, a neighbour on a shared core, context growth, the batch drifting inside its
bucket) is common to every arm and moves over tens of steps; averaging raw intervals per arm
would compare an arm measured during a busy minute with one measured during a quiet one, and
on a noisy host the controller then locks onto whichever arm happened to be sampled while the
machine was quiet. So the controller estimates, in log seconds,

    y_t = level_t + mu[arm_t] + noise,   level: random walk,  mu[arm]: nearly constant

with a scalar Kalman update per step that ignores the cross-covariances (cheap: O(1) per
step). The gains do the right thing without tuning: a long-played arm has a precise ``mu``, so
its surprises move the *level*; a freshly probed or stale arm has a vague ``mu``, so its
surprise moves *its own estimate* and leaves the level alone. An arm's variance grows while it
is not played, which is also what makes the UCB bonus re-probe stale arms.

How noisy a step is and how fast the load moves are measured, not assumed (DriftEstimator, a
variogram of the played arm), and outliers of a well-known arm are told apart: a lone one is a
stall, two in a row are a load shift. Variances are kept in units of the measurement noise
``r``, so ``1 / var`` reads as "effective samples".
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol


class ArmLike(Protocol):
    """An arm as the filter sees it (``ArmWindow`` is one)."""

    mu: float  # log seconds, relative to the level
    var: float  # in units of r; 0 = never measured
    seen: int  # filter clock at the last update


# Measurement-noise floor (log-time variance): 1% jitter; below that the filter trusts every
# sample completely and stalls would still move it through the clamp below.
_R_MIN = 1e-4
_R_INIT = 4e-3
# An innovation larger than this many standard deviations is clipped.
_CLIP_SIGMAS = 3.0
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


class TimeFilter:
    """Shared load level plus per-arm log costs. Arms are any objects with ``mu``, ``var``
    (in units of ``r``) and ``seen`` (the filter clock when last updated) attributes."""

    __slots__ = ("_arm_drift", "_drift", "_outlier_side", "clock", "level", "level_drift",
                 "level_var", "r")

    def __init__(self, level_drift: float, arm_drift: float) -> None:
        # Per-step variance growth, in units of r. ``level_drift`` is the prior for how fast
        # the load moves, replaced by the measured value once the variogram has data; an
        # arm's cost is nearly constant but is re-checked after long absences.
        self.level_drift = level_drift
        self._arm_drift = arm_drift
        self._drift = DriftEstimator()
        self._outlier_side = 0  # sign of the last step's outlier (0: it was not one)
        self.level = 0.0
        self.level_var = 1.0
        self.r = _R_INIT
        self.clock = 0

    def load(self) -> float:
        """Current load factor (``exp(level)``; 1.0 before any measurement)."""
        return math.exp(self.level)

    def arm_var(self, arm: ArmLike) -> float:
        """An arm's variance now, after ``clock - seen`` steps without being played."""
        return arm.var + self._arm_drift * (self.clock - arm.seen)

    def update(self, arm: ArmLike, seconds: float) -> None:
        """Fold in one clean step of ``arm`` that took ``seconds``."""
        self.clock += 1
        y = math.log(seconds)
        self._drift.observe(arm, y)
        measured = self._drift.estimate()
        if measured is not None:
            self.r, self.level_drift = measured
        self.level_var += self.level_drift
        if arm.var <= 0.0:
            # First sample of this arm: all of it is the arm (the level is known from others).
            arm.mu = y - self.level
            arm.var = 1.0 + self.level_var
            arm.seen = self.clock
            return
        p_arm = self.arm_var(arm)
        p_level = self.level_var
        s = p_level + p_arm + 1.0  # innovation variance, units of r
        e = y - self.level - arm.mu
        if measured is None:
            # Until the variogram is ready, learn the noise scale from the innovations
            # (their variance is s * r).
            self.r += 0.05 * (min(e * e / s, 9.0 * self.r) - self.r)
            if self.r < _R_MIN:
                self.r = _R_MIN
        # Beyond a few sigmas the surprise of a well-known arm is an outlier. One alone is a
        # stall, neither a load change nor a property of the arm: it is clipped. Two in a row
        # on the same side are a load shift: the level is re-anchored on this sample at once.
        # A thin arm (less certain than the level) is never treated so: its estimate is one or
        # two samples, possibly taken under another load, so a surprise says more about the
        # estimate than about a stall, and the plain update lets it take most of it.
        bound = _CLIP_SIGMAS * math.sqrt(s * self.r)
        side, shifted = outlier_side(e, bound, p_arm <= p_level, self._outlier_side)
        self._outlier_side = side
        if shifted:
            self.level += e
            self.level_var = 1.0 + p_arm
            arm.var = p_arm
            arm.seen = self.clock
            return
        if side:
            e = side * bound
        self.level += p_level / s * e
        arm.mu += p_arm / s * e
        self.level_var = p_level * (1.0 - p_level / s)
        arm.var = p_arm * (1.0 - p_arm / s)
        arm.seen = self.clock
