"""Step-cost posterior of the online controller: one small Kalman filter.

A steady decode step of ``B`` requests verifying ``g`` drafts each takes

    T = tau * exp(L) * f,   f = a_k + ran * ([g > 0] (d_k (g + 1) + delta_k) + [g == 0] z_k)

* ``L``: the log load level (other processes, clock scaling, a shared core, the batch
  drifting inside its bucket), a random walk common to every arm and bucket;
* ``a_k``: bucket ``k``'s target-only step (bucket = power of two of the batch). A step that
  skipped the drafter (``ran`` = 0, the host's sticky gamma 0) is the row ``a_k`` of the same
  regression: every speculative step is measured against it, no separate zero arm;
* ``d_k``: one more verified token per request plus one drafter pass (the per-token cost
  ``b B`` of the affine form at the bucket's batch, plus the draft pass ``d``: kept per bucket
  because measured step times are not linear in the batch, e.g. vLLM's H100 table);
* ``delta_k``: the fixed overhead of a speculative step minus one increment (prior mean 0:
  the overhead costs about one increment; ``overhead_sd``);
* ``z_k``: a zero-depth step in which the drafter still ran (0 on an ideal host, about
  ``d + overhead`` for vLLM's K=0).

``g`` in a row is the mean drafts verified per request (a batch in which some requests no
longer draft, a budget-trimmed one, is priced by what it verified). ``tau`` is the first
measured step (or the cost prior's median), so every coefficient is a plain number near 1
and the priors below are scale free. The state ``[L, a_k, d_k, delta_k, z_k]`` of the bucket
in use is one Gaussian with full covariance, updated by an extended Kalman filter in log time
(``y = L + log f``): a long-played arm's surprise moves the level, a new arm's moves the
coefficients, unmeasured arms are predicted by the affine structure. Other buckets keep their
coefficients' mean and covariance (their correlation with the level is dropped when the batch
leaves them, which only widens the sum's uncertainty); a new bucket starts from its nearest
neighbour's. The noise ``r`` and the level's drift are measured by a variogram
(load.DriftEstimator); stalls are clipped and two outliers in a row re-anchor the level, as
in adaptive/load.py.
"""

from __future__ import annotations

import math
import random

from ._limits import bucket_index
from .cost_prior import CostPrior
from .load import DriftEstimator, outlier_side

N = 4  # coefficients per bucket: a, d, delta, z
_A, _D, _DELTA, _Z = range(N)
# Prior means and standard deviations in units of tau (delta's sd is a knob): a step costs
# ~tau, a draft increment ~0.1 tau, the data moves them within a few steps. z is tight: an
# arm that is rarely played (a drafter-running zero where speculation pays) must not be
# drawn cheaper than a target-only step.
_PRIOR_MEAN = (0.5, 0.1, 0.0, 0.1)
_PRIOR_SD = (0.5, 0.2, 0.0, 0.1)
_LEVEL_VAR0 = 1.0  # log^2: the level is unknown until the first samples
_R_MIN = 1e-4  # measurement-noise floor (1% jitter), as load.py
_R_INIT = 4e-3
_CLIP = 3.0  # innovations beyond this many sigmas are clipped (stalls)
_F_MIN = 1e-3  # predicted costs are kept positive (units of tau)
_A_MIN = 0.01  # smallest target-only step (units of tau)
# A new bucket starts from its nearest neighbour's coefficients, widened by this share of
# each (the shape of T(g) transfers between batch sizes; the level follows at once).
_WIDEN = 0.1
# A cost prior's samples are folded in with this log-time sd: a dummy step is not a real one
# (no real KV lengths, no sampling); a real one (the start-up calibration's median of three,
# a persisted state's mean) is as good as a few steps. The level is then made uncertain
# again so the first real steps re-anchor it while the shape the prior gave stays.
_DUMMY_SAMPLE_SD = 0.1
_REAL_SAMPLE_SD = 0.03
# The sampling factor of a bucket's covariance is refreshed every this many updates, and the
# coefficients' drift is added in lumps of this many steps (the mean is always current). A
# bucket's first factor is normally its prior's (or its neighbour's), so its first 16
# samples draw at that width: that is part of how a new bucket is explored (refreshing as
# the posterior narrows explores less and re-opens a switched-off drafter less often).
_CHOL_EVERY = 16
_DRIFT_EVERY = 8
# Draws of an infeasible machine are redrawn this many times before being projected. Only
# the feasible region has prior mass: an untruncated draw with a negative target-only cost
# makes per-token cost all there is, and a shallower arm look best even when every draft
# is accepted (with only the deepest arm measured, a persisted state, ~15% of draws).
_REDRAWS = 8
_TWO_PI = 2.0 * math.pi


def features(batch: int, verified: int, gamma: int, ran: bool) -> list[float]:
    """Regression row ``[x_a, x_d, x_delta, x_z]`` of a step of ``batch`` requests that
    verified ``verified`` tokens (drafts plus one each) at gamma ``gamma``."""
    if not ran:
        return [1.0, 0.0, 0.0, 0.0]
    if gamma > 0:
        return [1.0, verified / batch, 1.0, 0.0]  # (g + 1) at a uniform width
    return [1.0, 0.0, 0.0, 1.0]


class _Bucket:
    __slots__ = ("chol", "chol_at", "cov", "mean", "samples")

    def __init__(self, mean: list[float], cov: list[list[float]]) -> None:
        self.mean = mean
        self.cov = cov  # N rows of N
        self.samples = 0
        self.chol: tuple[float, ...] = ()  # Cholesky factor of cov, for sampling
        self.chol_at = 0  # samples when it was computed


class CostPosterior:
    """Gaussian posterior over the load level and each bucket's cost coefficients."""

    __slots__ = ("_active", "_buckets", "_cross", "_drift", "_measured", "_outlier",
                 "_overhead_var", "_q_floor", "_q_theta", "level", "level_drift", "level_var",
                 "r", "tau")

    def __init__(self, overhead_sd: float, level_drift: float, cost_drift: float) -> None:
        self._overhead_var = overhead_sd * overhead_sd
        self.level_drift = level_drift  # prior, in units of r, until the variogram has data
        self._q_theta = cost_drift  # per-step variance growth, share of each coefficient's
        # square; plus this much of its prior per lump, so a zero coefficient can move too
        self._q_floor = [_DRIFT_EVERY * cost_drift * 0.01 * self._prior_var(i)
                         for i in range(N)]
        self._drift = DriftEstimator()
        self._measured = False  # the variogram has measured r and the drift
        self._buckets: dict[int, _Bucket] = {}
        self._active = -1
        self._cross = [0.0] * N  # cov(level, theta) of the active bucket
        self._outlier = 0
        self.level = 0.0
        self.level_var = _LEVEL_VAR0
        self.r = _R_INIT
        self.tau = 0.0  # seconds; 0 until the first sample

    # -- structure --------------------------------------------------------------------------

    def bucket(self, idx: int) -> _Bucket:
        """The bucket ``idx`` (created from its nearest neighbour, or the prior)."""
        b = self._buckets.get(idx)
        if b is None:
            b = self._new_bucket(idx)
            self._buckets[idx] = b
        return b

    def _new_bucket(self, idx: int) -> _Bucket:
        if self._buckets:
            near = min(self._buckets, key=lambda j: (abs(j - idx), -self._buckets[j].samples))
            src = self._buckets[near]
            cov = [list(row) for row in src.cov]
            for i in range(N):
                w = _WIDEN * src.mean[i]
                cov[i][i] += w * w + 0.01 * self._prior_var(i)
            return _Bucket(list(src.mean), cov)
        cov = [[self._prior_var(i) if i == j else 0.0 for j in range(N)] for i in range(N)]
        return _Bucket(list(_PRIOR_MEAN), cov)

    def _prior_var(self, i: int) -> float:
        return self._overhead_var if i == _DELTA else _PRIOR_SD[i] * _PRIOR_SD[i]

    def buckets(self) -> list[int]:
        """Indices of the buckets with a posterior."""
        return sorted(self._buckets)

    # -- learning ---------------------------------------------------------------------------

    def update(self, idx: int, x: list[float], seconds: float, arm: object) -> None:
        """Fold in one clean step of bucket ``idx`` with row ``x`` that took ``seconds``;
        ``arm`` identifies what was played (for the noise variogram)."""
        if self.tau <= 0.0:
            self.tau = seconds
        y = math.log(seconds / self.tau)
        drift = self._drift
        drift.observe(arm, y)
        if drift.n_long & 7 == 0:  # the noise moves slowly: re-read it every 8 long lags
            measured = drift.estimate()
            if measured is not None:
                self.r, self.level_drift = measured
                self._measured = True
        self._step(idx, x, y, self.r, True, not self._measured)

    def _step(self, idx: int, x: list[float], y: float, r: float, robust: bool,
              learn_r: bool) -> None:
        """One extended Kalman update; ``robust``: clip outliers, ``learn_r``: learn the noise
        from the innovations (until the variogram has measured it)."""
        b = self._buckets.get(idx) if idx == self._active else None
        if b is None:
            b = self.bucket(idx)
            self._active = idx
            self._cross = [0.0] * N
        b.samples += 1
        m = b.mean
        p = b.cov
        m0, m1, m2, m3 = m
        x0, x1, x2, x3 = x
        f = x0 * m0 + x1 * m1 + x2 * m2 + x3 * m3
        if f < _F_MIN:
            f = _F_MIN
        if self._q_theta and not b.samples % _DRIFT_EVERY:
            # Slow drift of the cost shape: each coefficient's variance grows by a share of
            # its square per step (added in lumps), so an arm left alone is re-checked.
            q = self._q_theta * _DRIFT_EVERY
            for i, qv in enumerate(self._q_floor):
                p[i][i] += q * m[i] * m[i] + qv
        level_var = self.level_var + self.level_drift * r
        inv_f = 1.0 / f
        h0, h1, h2, h3 = x0 * inv_f, x1 * inv_f, x2 * inv_f, x3 * inv_f
        # P H' for the joint state [level, theta] (H = [1, h]), written out for N = 4: this
        # runs every step.
        p0, p1, p2, p3 = p
        t0 = p0[0] * h0 + p0[1] * h1 + p0[2] * h2 + p0[3] * h3
        t1 = p1[0] * h0 + p1[1] * h1 + p1[2] * h2 + p1[3] * h3
        t2 = p2[0] * h0 + p2[1] * h1 + p2[2] * h2 + p2[3] * h3
        t3 = p3[0] * h0 + p3[1] * h1 + p3[2] * h2 + p3[3] * h3
        hph = h0 * t0 + h1 * t1 + h2 * t2 + h3 * t3  # the coefficients' share of the doubt
        c0, c1, c2, c3 = self._cross
        ch = c0 * h0 + c1 * h1 + c2 * h2 + c3 * h3
        ph_l = level_var + ch
        q0, q1, q2, q3 = t0 + c0, t1 + c1, t2 + c2, t3 + c3
        s = level_var + 2.0 * ch + hph + r
        self.level_var = level_var
        e = y - self.level - math.log(f)
        if learn_r:
            self.r += 0.05 * (min(e * e / s * r, 9.0 * self.r) - self.r)
            if self.r < _R_MIN:
                self.r = _R_MIN
        if robust:
            # A well-known prediction's large surprise is an outlier: one alone is a stall
            # (clipped), two in a row on the same side are a load shift (the level is
            # re-anchored at once). A vague prediction is never treated so: the surprise then
            # says more about the coefficients than about the machine.
            bound = _CLIP * math.sqrt(s)
            side = 0
            if e > bound or e < -bound:
                side, shifted = outlier_side(e, bound, hph <= level_var, self._outlier)
                if shifted:
                    self._outlier = side
                    self.level += e
                    self.level_var = r + hph
                    self._cross = [0.0] * N
                    return
                if side:
                    e = side * bound
            self._outlier = side
        inv = 1.0 / s
        ke = e * inv
        # Physics the linearised update does not know: a target step costs something, a
        # draft increment or a drafter pass never saves time. A surprise far outside the
        # linear range (a load change in the very first steps) would step across those
        # bounds; the step is shortened to stay inside them, level and coefficients alike,
        # so the split between them stays consistent (clipping one coefficient alone had
        # another absorb the difference, and the filter never recovered).
        dm0, dm1, dm2, dm3 = q0 * ke, q1 * ke, q2 * ke, q3 * ke
        if not (m0 + dm0 >= _A_MIN and m1 + dm1 >= 0.0 and (m1 + m2) + (dm1 + dm2) >= 0.0
                and m3 + dm3 >= 0.0):  # the common case, a step inside the bounds, is whole
            ke *= _feasible_step(m, [dm0, dm1, dm2, dm3])
        self.level += ph_l * ke
        b.mean = [m0 + q0 * ke, m1 + q1 * ke, m2 + q2 * ke, m3 + q3 * ke]
        self.level_var -= ph_l * ph_l * inv
        kl = ph_l * inv
        self._cross = [c0 - kl * q0, c1 - kl * q1, c2 - kl * q2, c3 - kl * q3]
        g0, g1, g2, g3 = q0 * inv, q1 * inv, q2 * inv, q3 * inv
        p[0] = [p0[0] - g0 * q0, p0[1] - g0 * q1, p0[2] - g0 * q2, p0[3] - g0 * q3]
        p[1] = [p1[0] - g1 * q0, p1[1] - g1 * q1, p1[2] - g1 * q2, p1[3] - g1 * q3]
        p[2] = [p2[0] - g2 * q0, p2[1] - g2 * q1, p2[2] - g2 * q2, p2[3] - g2 * q3]
        p[3] = [p3[0] - g3 * q0, p3[1] - g3 * q1, p3[2] - g3 * q2, p3[3] - g3 * q3]

    def apply_prior(self, prior: CostPrior) -> int:
        """Fold in a cost prior's samples (see _DUMMY_SAMPLE_SD). Returns the samples used."""
        times = sorted(s.seconds for s in prior.samples)
        if not times:
            return 0
        if self.tau <= 0.0:
            self.tau = times[len(times) // 2]
        sd = _DUMMY_SAMPLE_SD if prior.needs_anchor else _REAL_SAMPLE_SD
        r = sd * sd
        for s in prior.samples:
            idx = bucket_index(s.batch)
            x = features(s.batch, s.batch * (1 + s.gamma), s.gamma, s.drafter_ran)
            self._step(idx, x, math.log(s.seconds / self.tau), r, False, False)
        # The shape is kept; the level of real steps is measured afresh.
        self.level_var = _LEVEL_VAR0
        self._cross = [0.0] * N
        self._active = -1
        return len(prior.samples)

    # -- prediction -------------------------------------------------------------------------

    def mean_costs(self, idx: int, rows: list[list[float]]) -> list[float]:
        """Posterior-mean ``f`` (units of tau, load-free) of each row in bucket ``idx``."""
        m = self.bucket(idx).mean
        return [max(x[0] * m[0] + x[1] * m[1] + x[2] * m[2] + x[3] * m[3], _F_MIN)
                for x in rows]

    def sample_costs(self, idx: int, rows: list[list[float]], rng: random.Random,
                     width: float = 1.0) -> list[float]:
        """``f`` of each row under one draw of bucket ``idx``'s coefficients, ``width``
        posterior sds wide (Thompson sampling; the level is common to a bucket's arms and
        cancels between them). The draw is of the posterior truncated to machines that can
        exist (the bounds _feasible_step keeps the mean in): by rejection, projected onto the
        bounds after _REDRAWS misses."""
        b = self.bucket(idx)
        k = b.chol
        if not k or b.samples - b.chol_at >= _CHOL_EVERY:
            k = b.chol = _cholesky(b.cov)
            b.chol_at = b.samples
        uniform = rng.random
        m = b.mean
        for _ in range(_REDRAWS):
            # Four standard normals as two Box-Muller pairs, written out: a third of the
            # cost of four random.gauss calls, and this runs every decision.
            u = uniform() * _TWO_PI
            r = math.sqrt(-2.0 * math.log(1.0 - uniform())) * width
            z0, z1 = math.cos(u) * r, math.sin(u) * r
            u = uniform() * _TWO_PI
            r = math.sqrt(-2.0 * math.log(1.0 - uniform())) * width
            z2, z3 = math.cos(u) * r, math.sin(u) * r
            t0 = m[0] + k[0] * z0  # the factor written out (N = 4): this runs every decision
            t1 = m[1] + k[4] * z0 + k[5] * z1
            t2 = m[2] + k[8] * z0 + k[9] * z1 + k[10] * z2
            t3 = m[3] + k[12] * z0 + k[13] * z1 + k[14] * z2 + k[15] * z3
            if t0 >= _A_MIN and t1 >= 0.0 and t1 + t2 >= 0.0 and t3 >= 0.0:
                break
        else:
            t0, t1, t3 = max(t0, _A_MIN), max(t1, 0.0), max(t3, 0.0)
            t2 = max(t2, -t1)
        return [max(x[0] * t0 + x[1] * t1 + x[2] * t2 + x[3] * t3, _F_MIN) for x in rows]

    def seconds(self, f: float) -> float:
        """Seconds of a load-free cost ``f`` at today's load."""
        return f * self.tau * math.exp(self.level)

    def coefficients(self, idx: int) -> dict[str, float]:
        """The bucket's coefficients in seconds at today's load (for reports)."""
        m = self.bucket(idx).mean
        k = self.tau * math.exp(self.level)
        return {name: m[i] * k for i, name in enumerate(("a", "d", "delta", "z"))}


def _feasible_step(m: list[float], dm: list[float]) -> float:
    """Largest share (<= 1) of the move ``dm`` from ``m`` that keeps a >= _A_MIN, d >= 0,
    d + delta >= 0 and z >= 0."""
    step = 1.0
    for lo, now, move in ((_A_MIN, m[_A], dm[_A]), (0.0, m[_D], dm[_D]),
                          (0.0, m[_D] + m[_DELTA], dm[_D] + dm[_DELTA]), (0.0, m[_Z], dm[_Z])):
        if move < 0.0 and now + move < lo:
            room = (now - lo) / -move if now > lo else 0.0
            if room < step:
                step = room
    return step


def _cholesky(p: list[list[float]]) -> tuple[float, ...]:
    """Lower Cholesky factor (row-major, flat) of an N x N covariance; non-positive pivots (a
    direction the data pinned to rounding error) give a zero column."""
    out = [0.0] * (N * N)
    for i in range(N):
        for j in range(i + 1):
            acc = p[i][j]
            for k in range(j):
                acc -= out[i * N + k] * out[j * N + k]
            if i == j:
                out[i * N + i] = math.sqrt(acc) if acc > 1e-12 else 0.0
            else:
                d = out[j * N + j]
                out[i * N + j] = acc / d if d > 0.0 else 0.0
    return tuple(out)


__all__ = ["N", "CostPosterior", "features"]
