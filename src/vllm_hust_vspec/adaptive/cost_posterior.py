"""The step-cost model: one small Kalman filter over every step the host runs.

A step of ``B`` decoding requests verifying ``V`` tokens at depth ``g`` (drafter ``ran`` or
skipped) and prefilling ``P`` prompt tokens takes ``T = tau * exp(L) * f``, with

    f = a_k + ran ([g > 0] (d_k (g + 1) + delta_k) + [g == 0] z_k) - u (B (g + 1) - V) / 64
          + [P == 0] s_kg + [P > 0] (m + c P / 64 + w g + o_g)

``L`` the log load level (other processes, clock scaling, the batch drifting inside its
bucket), a random walk shared by every arm; per power-of-two batch bucket ``k``: the target
step ``a``, one more verified token plus drafter pass ``d``, a speculative step's overhead
``delta`` (prior: about one increment), a drafter-running zero ``z``, and ``s_kg``, depth
``g``'s deviation from that affine shape (a width without a graph, a native one that is cheap);
for the host: what a verified token costs on its own ``u`` (drafts left unverified save it;
steps that verify all they draft never show it), and what admitting adds: a mixed step's fixed
cost ``m`` (all grouping saves), the prompts' work ``c``, a drafter pass on an admitting step
``w`` and depth ``g``'s deviation ``o_g``. Terms, priors and bounds: adaptive/cost_terms.py.

``tau`` is the first decode-only step (or the cost prior's median), so the coefficients are
plain numbers near 1 and the priors scale free. The state ``[L, host terms, the active
bucket's terms]`` is one Gaussian, updated by an extended Kalman filter in log time (an
admitting step's surprise in linear time): a long-played arm's surprise moves the level, a new
arm's the coefficients; unmeasured arms follow the affine structure, and a far miss on a depth
or admission not yet measured opens its own term first. Another bucket's terms keep their
mean and covariance (their correlation with the rest is dropped when the batch leaves them); a
new bucket starts from its nearest neighbour's. The noise and the level's drift are measured
by a variogram of the decode-only steps (load.DriftEstimator); stalls are clipped and two
outliers in a row re-anchor the level.
"""

from __future__ import annotations

import math
import random
from operator import mul

from ._limits import bucket_index
from .cost_prior import CostPrior
from .cost_terms import (
    A_MIN,
    ADMISSION,
    ADMITTING_DEV,
    ADMITTING_DEVIATION_SD,
    ADMITTING_PASS,
    BUCKET_NAMES,
    BUCKET_PRIOR,
    F_MIN,
    GLOBAL_PRIOR,
    INCREMENT,
    LEVEL,
    LEVEL_VAR0,
    OVERHEAD,
    PROMPT,
    STEADY_DEV,
    STEADY_DEVIATION_SD,
    TARGET,
    TOKEN_UNIT,
    VERIFIED_TOKEN,
    ZERO_PASS,
    Bounds,
    Row,
    cholesky_rows,
    feasible_step,
    price,
)
from .feedback import StepFeedback
from .load import DriftEstimator, outlier_side

_R_MIN = 1e-4  # measurement-noise floor (1% jitter), as load.py
_R_INIT = 4e-3
_CLIP = 3.0  # innovations beyond this many sigmas are clipped (stalls)
_LINEAR_R = 0.02  # noise variance (log^2) up to which admitting surprises are taken linearly
_YOUNG = 4  # steps showing a rare term before a far miss of them is taken for load
# A new bucket starts from its nearest neighbour's coefficients, widened by this share of
# each (the shape of T(g) transfers between batch sizes; the level follows at once).
_WIDEN = 0.1
# A cost prior's samples are folded in with this log-time sd: a dummy step is not a real one
# (no real KV lengths, no sampling); a real one (the start-up calibration's median of three,
# a persisted state's mean) is as good as a few steps. The level is then made uncertain
# again so the first real steps re-anchor it while the shape the prior gave stays.
_DUMMY_SAMPLE_SD = 0.1
_REAL_SAMPLE_SD = 0.03
_PRIOR_DEVIATION_SD = 0.1  # a start-up sample's width deviation (units of tau)
_ITERATIONS = 6  # re-linearisations of a start-up sample's update
# The sampling factor of a bucket's covariance is refreshed every this many updates, and the
# coefficients' drift is added in lumps of this many steps (the mean is always current). A
# bucket's first factor is normally its prior's (or its neighbour's), so its first 16
# samples draw at that width: that is part of how a new bucket is explored.
_CHOL_EVERY = 16
_DRIFT_EVERY = 8
# Draws of an infeasible machine are redrawn this many times before being projected. Only
# the feasible region has prior mass: an untruncated draw with a negative target-only cost
# makes per-token cost all there is, and a shallower arm look best even when every draft
# is accepted.
_REDRAWS = 8
_TWO_PI = 2.0 * math.pi
# Steady steps with one row (one bucket, one arm, every term they show measured) are folded
# in as one update of their mean log time once this many are held: for the same row the mean
# is all the steps say about the coefficients, and a settled controller's steps are mostly
# such runs. Each step's surprise is still checked against the prediction, so a stall or a
# load shift is taken at once; the Thompson draw reads a posterior up to this many steps old.
# Only while a step teaches little (the state's doubt of the step under this share of the
# noise): one update of a mean is linearised once, where steps taken one by one would be
# re-linearised as they move the state (after a load shift, a new arm).
_HOLD_STEPS = 8
_HOLD_DOUBT = 0.25


class _Held:
    """Steady steps of one row awaiting their joint update: the row's prediction (log cost
    and its variance) at the state they were held against, and their log times."""

    __slots__ = ("idx", "log_f", "n", "s", "x", "y_sum")

    def __init__(self, idx: int, x: Row, log_f: float, s: float) -> None:
        self.idx, self.x, self.log_f, self.s = idx, x, log_f, s
        self.n = 0
        self.y_sum = 0.0

class _Bucket:
    __slots__ = ("chol", "chol_at", "cov", "mean", "samples", "seen")

    def __init__(self, mean: list[float], cov: list[list[float]]) -> None:
        self.mean = mean  # the bucket's terms (stored while another bucket is active)
        self.cov = cov
        self.samples = 0
        self.seen: dict[int, int] = {}  # rare term (index in z) -> steps it was in
        self.chol: tuple[tuple[float, ...], ...] = ()  # factor of the sampling covariance
        self.chol_at = -1  # samples when it was computed


class CostPosterior:
    """Gaussian posterior over the load level, the host's admission terms and each bucket's
    cost coefficients, for depths ``0..max_gamma`` (module docstring)."""

    __slots__ = ("_active", "_arm_keys", "_buckets", "_drift", "_extra", "_held", "_measured",
                 "_outlier", "_prior_mean", "_prior_var", "_q_floor", "_q_theta",
                 "_sample_order", "_step_bounds", "admissions", "cov", "level_drift",
                 "max_gamma", "mean", "n", "ng", "r", "tau")

    def __init__(self, max_gamma: int, overhead_sd: float = 0.05, level_drift: float = 1.0,
                 cost_drift: float = 1e-6) -> None:
        self.max_gamma = k = max_gamma
        self.ng = ng = ADMITTING_DEV + k
        self.n = n = ng + STEADY_DEV + k
        sds = ([0.0] + [sd for _, sd in GLOBAL_PRIOR] + [ADMITTING_DEVIATION_SD] * k
               + [sd for _, sd in BUCKET_PRIOR] + [STEADY_DEVIATION_SD] * k)
        sds[ng + OVERHEAD] = overhead_sd
        self._prior_mean = ([0.0] + [m for m, _ in GLOBAL_PRIOR] + [0.0] * k
                            + [m for m, _ in BUCKET_PRIOR] + [0.0] * k)
        self._prior_var = [sd * sd for sd in sds]
        self._prior_var[LEVEL] = LEVEL_VAR0
        self.level_drift = level_drift  # prior, in units of r, until the variogram has data
        self._q_theta = cost_drift  # per-step variance growth, share of each coefficient's
        # square; plus this much of its prior per lump, so a zero coefficient can move too
        self._q_floor = [0.0] + [_DRIFT_EVERY * cost_drift * 0.01 * v
                                 for v in self._prior_var[1:]]
        a, d = ng + TARGET, ng + INCREMENT
        self._step_bounds: Bounds = (  # physics every update keeps (see _step)
            (((a, 1.0),), A_MIN), (((d, 1.0),), 0.0),
            (((d, 1.0), (ng + OVERHEAD, 1.0)), 0.0), (((ng + ZERO_PASS, 1.0),), 0.0))
        # sampled in this order: the terms every step shows first (see sample_theta)
        self._sample_order = list(range(ng, n)) + list(range(1, ng))
        self.mean = list(self._prior_mean)  # z of the active bucket
        self.cov = [[self._prior_var[i] if i == j else 0.0 for j in range(n)]
                    for i in range(n)]
        self._drift = DriftEstimator()
        self._measured = False  # the variogram has measured r and the drift
        self._buckets: dict[int, _Bucket] = {}
        self._active = -1
        self._outlier = 0
        self._held: _Held | None = None
        self.admissions = 0  # admitting steps folded in
        self._extra = random.Random(0x5EED)  # draws of the rarely shown terms
        self._arm_keys = [object() for _ in range(max_gamma + 2)]  # variogram keys
        self.r = _R_INIT
        self.tau = 0.0  # seconds; 0 until the first sample

    @property
    def level(self) -> float:
        """The log load level."""
        self.flush()
        return self.mean[LEVEL]

    # -- structure --------------------------------------------------------------------------

    def row(self, batch: int, verified: float, gamma: int, ran: bool = True,
            prefill_tokens: int = 0) -> Row:
        """Regression row of a step of ``batch`` requests that verified ``verified`` tokens
        (drafts plus one each) at depth ``gamma`` and prefilled ``prefill_tokens``."""
        ng = self.ng
        g = gamma if gamma <= self.max_gamma else self.max_gamma
        out: list[tuple[int, float]] = [(ng + TARGET, 1.0)]
        if ran:
            if gamma > 0:
                out += ((ng + INCREMENT, gamma + 1.0), (ng + OVERHEAD, 1.0))
            else:
                out.append((ng + ZERO_PASS, 1.0))
        unverified = batch * (gamma + 1) - verified if ran and gamma > 0 else 0
        if unverified > 0:  # drafts per-request lengths (or the budget) left unverified
            out.append((VERIFIED_TOKEN, -unverified / TOKEN_UNIT))
        if prefill_tokens > 0:
            out += ((ADMISSION, 1.0), (PROMPT, prefill_tokens / TOKEN_UNIT))
            if g > 0 and ran:
                out += ((ADMITTING_PASS, float(g)), (ADMITTING_DEV + g - 1, 1.0))
        elif g > 0 and ran:
            out.append((ng + STEADY_DEV + g - 1, 1.0))
        return tuple(out)

    def _activate(self, idx: int) -> _Bucket:
        """Make bucket ``idx`` the one in the joint state (the previous one's terms are
        stored without their correlation with the global terms)."""
        b = self._buckets.get(idx)
        if idx == self._active and b is not None:
            return b
        ng, n = self.ng, self.n
        old = self._buckets.get(self._active)
        if old is not None:
            old.mean = self.mean[ng:]
            old.cov = [row[ng:] for row in self.cov[ng:]]
        if b is None:
            b = self._buckets[idx] = self._new_bucket(idx)
        self.mean[ng:] = b.mean
        cov = self.cov
        for i in range(n):
            row = cov[i]
            if i < ng:
                row[ng:] = [0.0] * (n - ng)
            else:
                row[:ng] = [0.0] * ng
                row[ng:] = b.cov[i - ng]
        self._active = idx
        return b

    def _new_bucket(self, idx: int) -> _Bucket:
        ng, nb = self.ng, self.n - self.ng
        if self._buckets:
            near = min(self._buckets, key=lambda j: (abs(j - idx), -self._buckets[j].samples))
            mean, cov = self._bucket_block(near)
            cov = [list(row) for row in cov]
            for i in range(nb):
                w = _WIDEN * mean[i]
                cov[i][i] += w * w + 0.01 * self._prior_var[ng + i]
            b = _Bucket(list(mean), cov)
            b.seen = dict(self._buckets[near].seen)  # what the neighbour measured, it knows
            return b
        return _Bucket(self._prior_mean[ng:], [
            [self._prior_var[ng + i] if i == j else 0.0 for j in range(nb)] for i in range(nb)])

    def _bucket_block(self, idx: int) -> tuple[list[float], list[list[float]]]:
        """Bucket ``idx``'s terms: mean and covariance."""
        ng = self.ng
        if idx == self._active:
            return self.mean[ng:], [row[ng:] for row in self.cov[ng:]]
        b = self._buckets[idx]
        return b.mean, b.cov

    def bucket(self, idx: int) -> _Bucket:
        """The bucket ``idx`` (created from its nearest neighbour, or the prior)."""
        b = self._buckets.get(idx)
        if b is None:
            b = self._buckets[idx] = self._new_bucket(idx)
        return b

    def buckets(self) -> list[int]:
        """Indices of the buckets with a posterior."""
        return sorted(self._buckets)

    def theta(self, idx: int) -> list[float]:
        """The posterior mean of ``z`` with bucket ``idx``'s terms (level 0)."""
        self.flush()
        return self._theta(idx)

    def _theta(self, idx: int) -> list[float]:
        self.bucket(idx)
        return [0.0] + self.mean[1:self.ng] + list(self._bucket_block(idx)[0])

    # -- learning ---------------------------------------------------------------------------

    def observe(self, fb: StepFeedback) -> None:
        """Fold in one completed step as the host reported it (every caller's filter, e.g.
        a controller's warm-up, applied before): decode-only steps by arm, admitting ones
        with their prompt tokens. A mixed step whose prompt tokens were not reported, and a
        step without a time, teach nothing."""
        batch, g = fb.batch_size, fb.gamma
        prefill = 0 if fb.steady else fb.prefill_tokens
        if fb.interval_s <= 0.0 or batch <= 0 or (not fb.steady and prefill <= 0):
            return
        drafted = fb.drafted
        # Tokens verified: drafts are trimmed per request by the budget or per-request
        # lengths, or zero for requests whose drafter was skipped (sticky host), so the
        # uniform width is checked first.
        verified = batch * (1 + g)
        if len(drafted) == batch and drafted.count(g) != batch:
            verified = batch + sum(drafted)
        ran = fb.drafter_ran
        x = self.row(batch, verified, g, ran, prefill)
        idx = batch.bit_length() - 1 if batch > 1 else 0  # bucket_index, inlined (hot path)
        arm = None if prefill else self._arm_keys[min(g, self.max_gamma) + 1 if ran or g else 0]
        self.update(idx, x, fb.interval_s, arm)

    def update(self, idx: int, x: Row, seconds: float, arm: object | None) -> None:
        """Fold in one step of bucket ``idx`` with row ``x`` that took ``seconds``; ``arm``
        identifies a decode-only step's arm for the noise variogram (None: an admitting
        step, whose prompt work varies, is left out of it)."""
        if self.tau <= 0.0:
            if arm is None:
                return  # an admitting step has no decode step to be measured against yet
            self.tau = seconds
        y = math.log(seconds / self.tau)
        if arm is None:
            self.admissions += 1
        else:
            drift = self._drift
            drift.observe(arm, y)
            if drift.n_long & 7 == 0:  # the noise moves slowly: re-read it every 8 long lags
                measured = drift.estimate()
                if measured is not None:
                    self.r, self.level_drift = measured
                    self._measured = True
            if self._measured and self._hold(idx, x, y):
                return
        self.flush()
        self._step(idx, x, y, self.r, True, not self._measured)

    def _hold(self, idx: int, x: Row, y: float) -> bool:
        """Hold a steady step for a joint update with the next ones of its row (see
        _HOLD_STEPS); False when it must be taken on its own: a term it shows is young, or
        its surprise is beyond the clip bound (a stall or a load shift)."""
        held = self._held
        if held is None or held.idx != idx or held.x != x:
            self.flush()
            if idx != self._active:
                return False
            seen = self._buckets[idx].seen
            if any(self._rare(i) and seen.get(i, 0) < _YOUNG for i, _ in x):
                return False
            log_f, s = self._prediction(x)
            if s > (1.0 + _HOLD_DOUBT) * self.r:
                return False
            held = self._held = _Held(idx, x, log_f, s)
        e = y - held.log_f
        if e * e > _CLIP * _CLIP * held.s:
            return False
        self._outlier = 0
        held.n += 1
        held.y_sum += y
        if held.n >= _HOLD_STEPS:
            self.flush()
        return True

    def _rare(self, i: int) -> bool:
        """Term ``i`` shows only on some steps (the admission term, a depth's deviation): a far
        miss of it while young opens it (see _step)."""
        ng = self.ng
        return i == ADMISSION or ADMITTING_DEV <= i < ng or i >= ng + STEADY_DEV

    def _prediction(self, x: Row) -> tuple[float, float]:
        """Log cost (level included) of row ``x`` in the active bucket and its variance for
        one step (the level's drift and the noise in)."""
        m, p = self.mean, self.cov
        f = max(sum(m[i] * v for i, v in x), F_MIN)
        var = p[LEVEL][LEVEL] + self.level_drift * self.r + self.r
        for i, vi in x:
            pi = p[i]
            var += 2.0 * vi / f * pi[LEVEL]
            for j, vj in x:
                var += vi * vj / (f * f) * pi[j]
        return m[LEVEL] + math.log(f), var

    def flush(self) -> None:
        """Fold in the held steady steps (one update of their mean log time); every read of
        the posterior but the Thompson draw calls it first."""
        held = self._held
        if held is None:
            return
        self._held = None
        if held.n:
            self._step(held.idx, held.x, held.y_sum / held.n, self.r / held.n, False, False,
                       steps=held.n)

    def _step(self, idx: int, x: Row, y: float, r: float, robust: bool,
              learn_r: bool, again: bool = False, steps: int = 1) -> None:
        """One extended Kalman update of the joint state; ``robust``: clip outliers,
        ``learn_r``: learn the noise from the innovations (until the variogram has it);
        ``again``: the same step once more after a term was opened (its drift is in);
        ``steps``: the mean of this many steps of one row (``r`` is its noise)."""
        b = self._activate(idx)
        lumps = 0
        if not again:
            lumps = (b.samples + steps) // _DRIFT_EVERY - b.samples // _DRIFT_EVERY
            b.samples += steps
        m = self.mean
        p = self.cov
        f = 0.0
        for i, v in x:
            f += m[i] * v
        if f < F_MIN:
            f = F_MIN
        if self._q_theta and lumps:
            # Slow drift of the cost shape: each coefficient's variance grows by a share of
            # its square per step (added in lumps), so an arm left alone is re-checked.
            q = self._q_theta * _DRIFT_EVERY * lumps
            floor = self._q_floor
            for i in range(1, self.n):
                p[i][i] += q * m[i] * m[i] + floor[i] * lumps
        if not again:
            p[LEVEL][LEVEL] += self.level_drift * r * steps * steps  # r: the mean's noise
        h = [(i, v / f) for i, v in x]
        # P h over the row's few non-zero features (P is symmetric: rows for columns), the
        # coefficients' part, then the level's
        i0, hv0 = h[0]
        t = [hv0 * a for a in p[i0]]
        for i, hv in h[1:]:
            t = [a + hv * b for a, b in zip(t, p[i], strict=True)]
        hph = 0.0  # the coefficients' share of the doubt
        for i, hv in h:
            hph += hv * t[i]
        level_var = p[LEVEL][LEVEL]
        ch = t[LEVEL]  # cov(level, coefficients' prediction)
        t = [a + b for a, b in zip(t, p[LEVEL], strict=True)]
        s = level_var + 2.0 * ch + hph + r
        e = y - m[LEVEL] - math.log(f)
        rare, seen = -1, _YOUNG
        for i, _ in x:  # the admission term first, then a depth's deviation
            if self._rare(i):
                n_i = b.seen.get(i, 0)
                if n_i < _YOUNG:
                    b.seen[i] = n_i + 1
                    if rare < 0:
                        rare, seen = i, n_i
        if seen < _YOUNG and e * e > _CLIP * _CLIP * s and not learn_r:
            # A depth (or admitting) not measured yet missed by far (once the noise is
            # known: a guessed one makes every noisy step far): suspected to be its own term
            # (a width without a graph, a mixed step outside the graphs) before the machine's
            # load, so that term is opened to the size of the miss and the step is taken
            # again. A measured one's miss is load (below).
            p[rare][rare] += (f * e) ** 2
            b.seen[rare] = _YOUNG  # once
            self._step(idx, x, y, r, robust, learn_r, again=True)
            return
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
                    m[LEVEL] += e
                    p[LEVEL] = [0.0] * self.n
                    for prow in p:
                        prow[LEVEL] = 0.0
                    p[LEVEL][LEVEL] = r + hph
                    return
                if side:
                    e = side * bound
            self._outlier = side
        if r < _LINEAR_R and any(i == ADMISSION for i, _ in x):
            # An admitting step's terms add to the step, so its surprise is taken in linear
            # time (the log's linearisation undershoots a mixed step many decode steps long),
            # less the lognormal noise's own mean (exp(r / 2)), which would bias it up. Not on
            # a host whose steps jitter by tens of percent: its linear surprises are not the
            # Gaussian ones the gain assumes.
            e = math.expm1(e - 0.5 * r)
        inv = 1.0 / s
        ke = e * inv
        # A surprise far outside the linear range (a load change in the very first steps)
        # would step across the physical bounds; the step is shortened to stay inside them,
        # level and coefficients alike, so the split between them stays consistent. The
        # terms only some steps show are projected onto their bounds after.
        self.mean = self._moved(m, t, ke)
        self._downdate(t, inv)

    def _moved(self, m: list[float], t: list[float], ke: float) -> list[float]:
        """``m`` moved by ``t * ke``, shortened to keep the step bounds, then projected."""
        ke *= feasible_step(self._step_bounds, m, [ti * ke for ti in t])
        return self._project([mi + ti * ke for mi, ti in zip(m, t, strict=True)])

    def _downdate(self, t: list[float], inv: float) -> None:
        """The rank-one covariance update of a scalar observation: ``P -= t t' inv``."""
        p = self.cov
        for i, ti in enumerate(t):
            if ti:
                gi = ti * inv
                p[i] = [a - gi * tj for a, tj in zip(p[i], t, strict=True)]

    def apply_prior(self, prior: CostPrior) -> int:
        """Fold in a cost prior's samples (see _DUMMY_SAMPLE_SD). Returns the samples used."""
        times = sorted(s.seconds for s in prior.samples)
        if not times:
            return 0
        self.flush()
        if self.tau <= 0.0:
            self.tau = times[len(times) // 2]
        sd = _DUMMY_SAMPLE_SD if prior.needs_anchor else _REAL_SAMPLE_SD
        r = sd * sd
        # The calibration's steps share one machine state: the level is held at that state's
        # (0) while they are folded in, so each bucket's terms take its own times. A level
        # free to move would carry every later bucket's misfit, and the buckets stored
        # before (no longer in the joint state) would keep the level they were fitted at.
        drift, self.level_drift = self.level_drift, 0.0
        self._pin_level()
        # Where a calibration timed every width of a bucket, each width's deviation from the
        # affine shape is as free as those times make it (the tight prior is for a host's
        # own steps, which mostly play one width and must teach the shared terms).
        widths: dict[int, set[int]] = {}
        for s in prior.samples:
            if s.drafter_ran and not s.prefill_tokens and s.gamma > 0:
                widths.setdefault(bucket_index(s.batch), set()).add(s.gamma)
        every = set(range(1, self.max_gamma + 1))
        freed = {idx for idx, seen in widths.items() if seen >= every}
        dev = self.ng + STEADY_DEV
        for s in prior.samples:
            idx = bucket_index(s.batch)
            if idx in freed:
                freed.discard(idx)
                self._activate(idx)
                for i in range(dev, self.n):
                    self.cov[i][i] = max(self.cov[i][i], _PRIOR_DEVIATION_SD ** 2)
            x = self.row(s.batch, s.batch * (1 + s.gamma), s.gamma, s.drafter_ran,
                         s.prefill_tokens)
            self._iterated_step(idx, x, math.log(s.seconds / self.tau), r)
        # The target alone over b (1 + g) tokens: a verified token's own cost (u), which
        # steps that verify all they draft cannot separate from a drafter pass. Times of one
        # forward pass that differ by their tokens alone: their slope is measured as well as
        # a real step, whatever the level a dummy run misses.
        r = _REAL_SAMPLE_SD * _REAL_SAMPLE_SD
        self.level_drift = drift
        self._pin_level(LEVEL_VAR0)  # their runs' own level
        batches = sorted({s.batch for s in prior.samples})
        for tokens, seconds in prior.verify:
            for b in batches:
                extra = tokens / b - 1.0
                if tokens % b == 0 and 1.0 <= extra <= self.max_gamma:
                    x = ((self.ng + TARGET, 1.0), (VERIFIED_TOKEN, (tokens - b) / TOKEN_UNIT))
                    self._step(bucket_index(b), x, math.log(seconds / self.tau), r, False,
                               False)
        # The shape is kept; the level of real steps is measured afresh.
        self._pin_level(LEVEL_VAR0)
        return len(prior.samples)

    def _iterated_step(self, idx: int, x: Row, y: float, r: float) -> None:
        """An iterated extended Kalman update (a start-up sample): the log cost is
        re-linearised at the updated terms until they settle. One linearisation at the
        prior's guess overshoots a time far from it (a target-only step a fifth of the
        guess lands on the bound) and leaves the doubt of a term that did not move."""
        b = self._activate(idx)
        b.samples += 1
        m, p = self.mean, self.cov
        lin = m
        t: list[float] = []
        s = 1.0
        for _ in range(_ITERATIONS):
            f = max(sum(lin[i] * v for i, v in x), F_MIN)
            h = [(i, v / f) for i, v in x]
            t = list(p[LEVEL])
            for i, hv in h:
                t = [a + hv * c for a, c in zip(t, p[i], strict=True)]
            s = t[LEVEL] + sum(hv * t[i] for i, hv in h) + r
            e = y - m[LEVEL] - math.log(f) - sum(hv * (m[i] - lin[i]) for i, hv in h)
            lin = self._moved(m, t, e / s)
        self.mean = lin
        self._downdate(t, 1.0 / s)

    def _pin_level(self, var: float = 0.0) -> None:
        """Forget the level's covariance with the coefficients; its variance becomes ``var``."""
        p = self.cov
        p[LEVEL] = [0.0] * self.n
        for prow in p:
            prow[LEVEL] = 0.0
        p[LEVEL][LEVEL] = var

    # -- prediction -------------------------------------------------------------------------

    def mean_costs(self, idx: int, rows: list[Row]) -> list[float]:
        """Posterior-mean ``f`` (units of tau, load-free) of each row in bucket ``idx``."""
        return price(self.theta(idx), rows)

    def sample_theta(self, idx: int, rng: random.Random, width: float = 1.0,
                     admitting: bool = True) -> list[float]:
        """One draw of ``z`` (level 0) with bucket ``idx``'s terms, truncated to machines that
        can exist: the four terms every step shows are drawn first, by rejection against
        the bounds every update keeps (projected after _REDRAWS misses); the terms only
        trimmed, admitting or one depth's steps show are drawn after, from a stream of their
        own (so ``rng`` is used as by a model without them), and projected. Without
        ``admitting`` the host's admission terms keep their mean (a caller that prices no
        admitting step saves their draw)."""
        b = self.bucket(idx)
        order = self._sample_order
        k = b.chol
        if not k or b.samples - b.chol_at >= _CHOL_EVERY or b.chol_at < 0:
            k = b.chol = cholesky_rows(self._sampling_cov(idx))
            b.chol_at = b.samples
        mean = self._theta(idx)  # held steps may wait (see _HOLD_STEPS)
        m = [mean[i] for i in order]
        uniform = rng.random
        n1 = len(order) if admitting else self.n - self.ng
        z = [0.0] * (n1 + 1)
        head: list[float] = m[:4]
        bounds = self._step_bounds
        ng = self.ng
        for _ in range(_REDRAWS):
            for j in (0, 2):  # standard normals as Box-Muller pairs
                u = uniform() * _TWO_PI
                rad = math.sqrt(-2.0 * math.log(1.0 - uniform())) * width
                z[j], z[j + 1] = math.cos(u) * rad, math.sin(u) * rad
            head = [m[i] + sum(map(mul, k[i], z)) for i in range(4)]
            trial = mean[:ng] + head  # the bounds read only these four
            if all(sum(trial[i] * c for i, c in terms) >= lo for terms, lo in bounds):
                break
        extra = self._extra.random
        for j in range(4, n1, 2):
            u = extra() * _TWO_PI
            rad = math.sqrt(-2.0 * math.log(1.0 - extra())) * width
            z[j], z[j + 1] = math.cos(u) * rad, math.sin(u) * rad
        out = mean
        for pos in range(n1):
            i = order[pos]
            out[i] = head[pos] if pos < 4 else m[pos] + sum(map(mul, k[pos], z))
        return self._project(out, True)

    def _sampling_cov(self, idx: int) -> list[list[float]]:
        """Covariance of every term but the level, in sampling order (the active bucket's
        joint with the global terms; another bucket's block-diagonal with them)."""
        order = self._sample_order
        if idx == self._active:
            p = self.cov
            return [[p[i][j] for j in order] for i in order]
        ng = self.ng
        bcov = self._buckets[idx].cov
        p = self.cov
        out = []
        for i in order:
            row = []
            for j in order:
                if i >= ng and j >= ng:
                    row.append(bcov[i - ng][j - ng])
                elif i < ng and j < ng:
                    row.append(p[i][j])
                else:
                    row.append(0.0)
            out.append(row)
        return out

    def _project(self, z: list[float], core: bool = False) -> list[float]:
        """``z`` moved onto the bounds: the terms only some steps show always, the four every
        step shows only when ``core`` (an update keeps those by its step length)."""
        ng, k = self.ng, self.max_gamma
        a, d, delta = ng + TARGET, ng + INCREMENT, ng + OVERHEAD
        if core:
            z[a] = max(z[a], A_MIN)
            z[d] = max(z[d], 0.0)
            z[delta] = max(z[delta], -z[d])
            z[ng + ZERO_PASS] = max(z[ng + ZERO_PASS], 0.0)
        for i in (ADMISSION, PROMPT, ADMITTING_PASS, VERIFIED_TOKEN):
            if z[i] < 0.0:
                z[i] = 0.0
        for g in range(1, k + 1):
            # a speculative step never costs less than the target's alone, an admitting step
            # never less than the same step without admissions
            s = ng + STEADY_DEV + g - 1
            z[s] = max(z[s], -(z[d] * (g + 1) + z[delta]))
            o = ADMITTING_DEV + g - 1
            z[o] = max(z[o], z[s] - z[ADMISSION] - z[ADMITTING_PASS] * g)
        return z

    def seconds(self, f: float) -> float:
        """Seconds of a load-free cost ``f`` at today's load."""
        return f * self.tau * math.exp(self.level)

    def term(self, idx: int, terms: tuple[tuple[int, float], ...]) -> tuple[float, float]:
        """Mean and sd, in seconds at today's load, of a linear combination of ``z`` with
        bucket ``idx``'s terms."""
        mean_z = self.theta(idx)
        mean = sum(mean_z[i] * c for i, c in terms)
        ng = self.ng
        if idx == self._active:
            p = self.cov
            var = sum(ci * cj * p[i][j] for i, ci in terms for j, cj in terms)
        else:
            bcov = self._buckets[idx].cov
            var = 0.0
            for i, ci in terms:
                for j, cj in terms:
                    if i >= ng and j >= ng:
                        var += ci * cj * bcov[i - ng][j - ng]
                    elif i < ng and j < ng:
                        var += ci * cj * self.cov[i][j]
        scale = self.tau * math.exp(self.mean[LEVEL])
        return mean * scale, math.sqrt(max(var, 0.0)) * scale

    def admission_cost(self, idx: int, gamma: int) -> tuple[float, float]:
        """Mean and sd (seconds) of what admitting adds to a step at depth ``gamma`` beyond
        its prompts' work: the part grouping admissions saves."""
        g = min(gamma, self.max_gamma)
        if g <= 0:
            return self.term(idx, ((ADMISSION, 1.0),))
        return self.term(idx, ((ADMISSION, 1.0), (ADMITTING_PASS, float(g)),
                               (ADMITTING_DEV + g - 1, 1.0),
                               (self.ng + STEADY_DEV + g - 1, -1.0)))

    def verify_token_cost(self, idx: int) -> tuple[float, float]:
        """Mean and sd (seconds) of one more verified token on its own (``u``; a drafter
        pass apart)."""
        mean, sd = self.term(idx, ((VERIFIED_TOKEN, 1.0),))
        return mean / TOKEN_UNIT, sd / TOKEN_UNIT

    def coefficient_sd(self, idx: int, name: str) -> float:
        """Posterior sd (seconds at today's load) of bucket ``idx``'s coefficient ``name``
        (one of the bucket's: a, d, delta, z)."""
        return self.term(idx, ((self.ng + BUCKET_NAMES.index(name), 1.0),))[1]

    def coefficients(self, idx: int) -> dict[str, float]:
        """The named terms with bucket ``idx``'s in seconds at today's load (for reports; the
        per-depth deviations as ``steady_<g>`` / ``admitting_<g>``)."""
        z = self.theta(idx)
        scale = self.tau * math.exp(self.mean[LEVEL])
        ng = self.ng
        out = {name: z[ng + i] * scale for i, name in enumerate(BUCKET_NAMES)}
        out["admission"] = z[ADMISSION] * scale
        out["prompt"] = z[PROMPT] * scale
        out["admitting_pass"] = z[ADMITTING_PASS] * scale
        out["u"] = z[VERIFIED_TOKEN] * scale / TOKEN_UNIT
        for g in range(1, self.max_gamma + 1):
            out[f"steady_{g}"] = z[ng + STEADY_DEV + g - 1] * scale
            out[f"admitting_{g}"] = z[ADMITTING_DEV + g - 1] * scale
        return out


def model_of(controller: object) -> CostPosterior | None:
    """The step-cost model a controller learns (``cost_model``), or None (a fixed, profile or
    UCB1 policy learns none)."""
    model = getattr(controller, "cost_model", None)
    return model if isinstance(model, CostPosterior) else None



__all__ = ["PROMPT", "TOKEN_UNIT", "CostPosterior", "Row", "model_of", "price"]
