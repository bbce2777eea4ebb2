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

Variances are kept in units of the measurement noise ``r`` (estimated online from the
innovations), so ``1 / var`` reads as "effective samples".
"""

from __future__ import annotations

import math
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


class TimeFilter:
    """Shared load level plus per-arm log costs. Arms are any objects with ``mu``, ``var``
    (in units of ``r``) and ``seen`` (the filter clock when last updated) attributes."""

    __slots__ = ("_arm_drift", "_level_drift", "clock", "level", "level_var", "r")

    def __init__(self, level_drift: float, arm_drift: float) -> None:
        # Per-step variance growth, in units of r: the level follows the load within a few
        # steps; an arm's cost is nearly constant but is re-checked after long absences.
        self._level_drift = level_drift
        self._arm_drift = arm_drift
        self.level = 0.0
        self.level_var = 1.0
        self.r = _R_INIT
        self.clock = 0

    def load(self) -> float:
        """Current load factor (``exp(level)``; 1.0 before any measurement)."""
        return math.exp(self.level)

    def arm_var(self, var: float, seen: int) -> float:
        """An arm's variance now, after ``clock - seen`` steps without being played."""
        return var + self._arm_drift * (self.clock - seen)

    def update(self, arm: ArmLike, seconds: float) -> None:
        """Fold in one clean step of ``arm`` that took ``seconds``."""
        self.clock += 1
        y = math.log(seconds)
        self.level_var += self._level_drift
        if arm.var <= 0.0:
            # First sample of this arm: all of it is the arm (the level is known from others).
            arm.mu = y - self.level
            arm.var = 1.0 + self.level_var
            arm.seen = self.clock
            return
        p_arm = self.arm_var(arm.var, arm.seen)
        p_level = self.level_var
        s = p_level + p_arm + 1.0  # innovation variance, units of r
        e = y - self.level - arm.mu
        # Learn the noise scale from the innovations (their variance is s * r).
        self.r += 0.05 * (min(e * e / s, 9.0 * self.r) - self.r)
        if self.r < _R_MIN:
            self.r = _R_MIN
        # Beyond a few sigmas the surprise is clipped: a stall is neither a load change nor a
        # property of the arm, and one must not swing either estimate.
        bound = _CLIP_SIGMAS * math.sqrt(s * self.r)
        if e > bound:
            e = bound
        elif e < -bound:
            e = -bound
        self.level += p_level / s * e
        arm.mu += p_arm / s * e
        self.level_var = p_level * (1.0 - p_level / s)
        arm.var = p_arm * (1.0 - p_arm / s)
        arm.seen = self.clock
