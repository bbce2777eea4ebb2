"""Per-position draft acceptance, learned online from verify feedback.

``p[k]`` is the *unconditional* probability that draft position ``k`` is accepted (all of
positions ``0..k`` accepted). With prefix acceptance (rejection sampling stops at the first
rejection) a request that drafted ``d`` tokens and got ``a`` accepted is one observation of
positions ``0..d-1`` with "accepted" for ``k < a``. The expected committed tokens per request
at gamma ``g`` is then ``1 + sum_{k<g} p[k]`` whatever the correlation between positions.

Counts are discounted every step so the model follows acceptance that drifts over time.
Positions that are no longer drafted (the controller runs a smaller gamma) lose weight and
shrink toward a geometric continuation of the positions below them, so a drop in acceptance
at low positions immediately lowers the estimates for deeper, unobserved ones too.

A second set of counts forgets within a few dozen requests. When the two disagree at
position 0 by more than sampling can explain (acceptance moved: a new domain, a new mix of
requests), the last few steps locate the change (the split that best separates them from the
old rate, a generalised likelihood ratio) and both memories restart from the steps after it:
a shift is followed within a step at large batches instead of a half-life, while stationary
data, which never trips the test, keeps the long memory's precision.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from .feedback import StepFeedback

_TINY = 1e-9
# Discounting stops at this weight: far above _TINY, so a long stretch without verify data
# (gamma 0 for thousands of steps) never turns a measured rate back into the prior; the
# measured ratio s/n persists until drafting is probed again.
_FLOOR = 1e-6
# Smallest half-life (requests) an EWMA weight maps to: what the configs accept.
_HALFLIFE_MIN = 1e-9
# The short memory: half-life in requests (at least one step). Short enough to see a shift
# at once at batch 32 and above, long enough that its rate is worth a test at batch 8.
_FAST_HALFLIFE_REQUESTS = 32.0
# Disagreement (in standard errors of the short memory's rate at position 0) taken as a
# shift. The error is the binomial one at the long memory's rate, which overstates an
# EWMA's (so the test is conservative); 4 is ~1 in 16,000 steps under pure sampling noise.
_SHIFT_Z = 4.0
# Rates near 0 or 1 have a binomial error near 0: a handful of misses must not read as a
# shift, so the variance is taken at a rate at least this far from either end.
_SHIFT_RATE_MARGIN = 0.02
# Requests (at position 0) of the recent steps kept to locate a change: the short memory
# trips within a few half-lives of a change, at any batch size.
_RECENT_REQUESTS = 128
# Fewest requests a restart starts from: the shortest suffixes are also the most extreme
# (the search picks the least likely one), so a few requests would restart from noise.
_MIN_RESTART_REQUESTS = 32


class AcceptanceModel:
    """Discounted per-position acceptance counts (an EWMA weighted by sample count)."""

    __slots__ = (
        "_decays",
        "_dirty",
        "_fn",
        "_fs",
        "_halflife_requests",
        "_max_steps",
        "_min_steps",
        "_n",
        "_p",
        "_prior",
        "_prior_weight",
        "_recent",
        "_recent_requests",
        "_s",
        "positions",
        "shifts",
    )

    def __init__(
        self,
        positions: int,
        *,
        prior: tuple[float, ...] = (0.6,),
        prior_weight: float = 8.0,
        halflife_requests: float = 256.0,
        min_halflife_steps: float = 4.0,
        max_halflife_steps: float = 64.0,
    ) -> None:
        """``prior`` gives p[0..] before any data (extended geometrically); ``prior_weight``
        is how many request-observations it counts as for deeper positions. The half-life of
        the discount is ``halflife_requests / batch`` steps, clamped to
        ``[min_halflife_steps, max_halflife_steps]``: large batches give many samples per
        step and can forget quickly, small batches need more steps for the same precision."""
        if positions < 0:
            raise ValueError(f"positions must be >= 0, got {positions}")
        self.positions = positions
        self._prior = extend_acceptance(prior, positions)
        self._prior_weight = prior_weight
        self._halflife_requests = halflife_requests
        self._min_steps = min_halflife_steps
        self._max_steps = max_halflife_steps
        self._s = [0.0] * positions
        self._n = [0.0] * positions
        self._p = list(self._prior)
        self._fs = [0.0] * positions
        self._fn = [0.0] * positions
        # the recent verify steps (requests at position 0, gamma, drafted, accepted), kept by
        # reference to locate a shift in
        self._recent: deque[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = deque()
        self._recent_requests = 0
        self._dirty = False
        self._decays: dict[int, tuple[float, float]] = {}  # batch -> (long, short) factors
        self.shifts = 0  # times both memories restarted after a shift

    def _decay(self, batch: int) -> tuple[float, float]:
        """Per-step discount factors of the long and the short memory at ``batch``."""
        d = self._decays.get(batch)
        if d is None:
            steps = self._halflife_requests / max(batch, 1)
            steps = min(max(steps, self._min_steps), self._max_steps)
            d = (0.5 ** (1.0 / steps),
                 0.5 ** (1.0 / max(_FAST_HALFLIFE_REQUESTS / max(batch, 1), 1.0)))
            if len(self._decays) < 4096:
                self._decays[batch] = d
        return d

    def update(self, gamma: int, drafted: tuple[int, ...], accepted: tuple[int, ...]) -> None:
        """Fold in one verify step: per-request drafted and accepted counts at ``gamma``."""
        reqs = len(accepted)
        if reqs == 0 or gamma <= 0 or self.positions == 0:
            return
        d, f = self._decays.get(reqs) or self._decay(reqs)
        s, n, fs, fn = self._s, self._n, self._fs, self._fn
        depth = gamma if gamma < self.positions else self.positions
        # _position_counts' rule, inlined (this runs every step): n_k = requests that
        # drafted more than k tokens, s_k = requests that got more than k accepted.
        full = len(drafted) == reqs and drafted.count(gamma) == reqs
        # Counting in a bytes copy is ~8x faster than tuple.count (memchr against a rich
        # compare per element): at batch 128 and gamma 4 it cuts this update by a third.
        # Counts beyond a byte (no real host sends them) keep the tuples.
        try:
            acc_counts: bytes | tuple[int, ...] = bytes(accepted)
            drafted_counts: bytes | tuple[int, ...] = drafted if full else bytes(drafted)
        except (TypeError, ValueError):
            acc_counts, drafted_counts = accepted, drafted
        below_a = 0
        below_d = 0
        tried = first = reqs
        for k in range(depth):
            if not full:
                below_d += drafted_counts.count(k)
                tried = len(drafted) - below_d
                if k == 0:
                    first = tried
            below_a += acc_counts.count(k)
            got = reqs - below_a
            if n[k] > _FLOOR:
                s[k] = s[k] * d + got
                n[k] = n[k] * d + tried
            else:
                s[k] += got
                n[k] += tried
            fs[k] = fs[k] * f + got
            fn[k] = fn[k] * f + tried
        for k in range(depth, self.positions):
            if n[k] > _FLOOR:
                s[k] *= d
                n[k] *= d
            fs[k] *= f
            fn[k] *= f
        recent = self._recent
        recent.append((first, gamma, drafted, accepted))
        self._recent_requests += first
        while len(recent) > 1 and self._recent_requests - recent[0][0] >= _RECENT_REQUESTS:
            self._recent_requests -= recent.popleft()[0]
        self._dirty = True
        if fn[0] > 0.0 and n[0] > fn[0]:
            rate = s[0] / n[0]
            rate = min(max(rate, _SHIFT_RATE_MARGIN), 1.0 - _SHIFT_RATE_MARGIN)
            gap = fs[0] / fn[0] - rate
            if gap * gap * fn[0] > _SHIFT_Z * _SHIFT_Z * rate * (1.0 - rate):
                self._restart(rate)

    def _restart(self, old_rate: float) -> None:
        """Acceptance moved away from ``old_rate``: restart both memories from the recent
        steps after the change: of the suffixes with at least ``_MIN_RESTART_REQUESTS``
        requests at position 0, the one least likely under the old rate (the largest
        binomial log-likelihood ratio); the short memory when none has that many."""
        best_llr = -1.0
        best: tuple[list[float], list[float]] | None = None
        tried = [0.0] * self.positions
        got = [0.0] * self.positions
        for _, gamma, drafted, accepted in reversed(self._recent):
            step_tried, step_got = _position_counts(gamma, self.positions, drafted, accepted)
            for k, (t_k, g_k) in enumerate(zip(step_tried, step_got, strict=True)):
                tried[k] += t_k
                got[k] += g_k
            if tried[0] < _MIN_RESTART_REQUESTS:
                continue
            llr = tried[0] * _bernoulli_kl(got[0] / tried[0], old_rate)
            if llr > best_llr:
                best_llr = llr
                best = (tried[:], got[:])
        if best is None:
            best = (self._fn[:], self._fs[:])
        self._n, self._s = best[0], best[1]
        self._fn, self._fs = best[0][:], best[1][:]
        self._recent.clear()
        self._recent_requests = 0
        self.shifts += 1

    def seed(self, weight: float) -> None:
        """Count the prior as ``weight`` observations of every position, so it is forgotten
        at the same pace as real data (used for a profile's default acceptance). Both
        memories hold it, so the first steps are tested against it like any data: data far
        from it is a shift and replaces it at once."""
        for k in range(self.positions):
            self._s[k] = self._fs[k] = self._prior[k] * weight
            self._n[k] = self._fn[k] = weight
        self._dirty = True

    def tick(self, batch: int) -> None:
        """A step without verify data (gamma 0): age the counts so that, when drafting is
        probed again, the fresh observations outweigh the old ones."""
        d, f = self._decay(batch)
        s, n, fs, fn = self._s, self._n, self._fs, self._fn
        for k in range(self.positions):
            if n[k] > _FLOOR:
                s[k] *= d
                n[k] *= d
            fs[k] *= f
            fn[k] *= f
        self._dirty = True

    def observe(self, feedback: StepFeedback) -> bool:
        """Fold in one step's verify data: its per-request counts, else its accept flags,
        else (no drafts verified: gamma 0) age the counts. True when drafts were verified.
        Valid on every step (prefill mixed in pollutes only the step's timing) except one whose
        lengths were trimmed per request (``StepFeedback.lengths_trimmed``): its counts are a
        sample biased toward easy requests and are left out."""
        if feedback.lengths_trimmed:
            return False
        g = feedback.gamma
        if g > 0 and feedback.accepted:
            self.update(g, feedback.drafted, feedback.accepted)
            return True
        if g > 0 and feedback.accept_flags:
            self.update_flags(g, feedback.accept_flags)
            return True
        self.tick(feedback.batch_size)
        return False

    def update_flags(self, gamma: int, flags: tuple[tuple[bool, ...], ...]) -> None:
        """Fold in per-position accept flags (used when per-request counts are missing)."""
        accepted = tuple(f.index(False) if False in f else len(f) for f in flags)
        drafted = tuple(len(f) for f in flags)
        self.update(gamma, drafted, accepted)

    def probabilities(self) -> list[float]:
        """Current estimate of p[k] for every position (non-increasing, in [0, 1])."""
        if not self._dirty:
            return self._p
        p = self._p
        s = self._s
        n = self._n
        w0 = self._prior_weight
        if not self.positions:
            self._dirty = False
            return p
        # Position 0 has nothing below it to extrapolate from: discounting keeps the ratio
        # s/n, so its last measured value persists (e.g. while gamma is 0).
        est = s[0] / n[0] if n[0] > _TINY else self._prior[0]
        p[0] = prev = est if est < 1.0 else 1.0
        prev2 = 1.0
        for k in range(1, self.positions):
            ratio = prev / prev2 if prev2 > _TINY else 0.0
            prior = prev * (ratio if ratio < 1.0 else 1.0)
            est = (s[k] + w0 * prior) / (n[k] + w0)
            if est > prev:
                est = prev
            p[k] = est
            prev2 = prev
            prev = est
        self._dirty = False
        return p

    def expected_committed(self) -> list[float]:
        """``E[g] = 1 + sum_{k<g} p[k]`` for g = 0..positions (tokens per request per step)."""
        out = [1.0]
        acc = 1.0
        for pk in self.probabilities():
            acc += pk
            out.append(acc)
        return out

    def weights(self) -> list[float]:
        """Effective (discounted) number of observations per position."""
        return list(self._n)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state for metrics and traces."""
        return {
            "acceptance": [round(v, 6) for v in self.probabilities()],
            "acceptance_weight": [round(v, 3) for v in self._n],
            "acceptance_shifts": self.shifts,
        }


def _position_counts(gamma: int, positions: int, drafted: tuple[int, ...],
                     accepted: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Per position ``k < min(gamma, positions)``: the requests that drafted more than ``k``
    tokens and those that got more than ``k`` accepted (prefix acceptance). ``tuple.count``
    runs in C, so this is O(gamma) Python steps for any batch."""
    reqs = len(accepted)
    depth = gamma if gamma < positions else positions
    full = len(drafted) == reqs and drafted.count(gamma) == reqs
    tried = [0] * depth
    got = [0] * depth
    below_a = 0
    below_d = 0
    for k in range(depth):
        below_a += accepted.count(k)
        if full:
            tried[k] = reqs
        else:
            below_d += drafted.count(k)
            tried[k] = len(drafted) - below_d
        got[k] = reqs - below_a
    return tried, got


def _bernoulli_kl(p: float, q: float) -> float:
    """KL divergence of Bernoulli(``p``) from Bernoulli(``q``), ``0 < q < 1``."""
    out = 0.0
    if p > 0.0:
        out += p * math.log(p / q)
    if p < 1.0:
        out += (1.0 - p) * math.log((1.0 - p) / (1.0 - q))
    return out


def halflife_from_ewma_weight(weight: float) -> float:
    """Discount half-life, in requests, of an EWMA whose newest observation weighs ``weight``
    (0 < weight <= 1): ``ln(0.5) / ln(1 - weight)`` (0.14.3's adaptive_ewma_weight).

    ``weight`` 1 keeps only the newest observation: the half-life is then the smallest one
    the model takes, and the model's step clamp (``min_halflife_steps``) decides.
    """
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not (
            0.0 < weight <= 1.0):
        raise ValueError(f"ewma weight must be a number in (0, 1], got {weight!r}")
    if weight >= 1.0:
        return _HALFLIFE_MIN
    return max(math.log(0.5) / math.log1p(-weight), _HALFLIFE_MIN)


def extend_acceptance(values: tuple[float, ...] | list[float], positions: int) -> list[float]:
    """Extend unconditional rates to ``positions`` entries by continuing the last conditional
    ratio (a single value ``a`` extends to ``a, a^2, a^3, ...``)."""
    if positions <= 0:
        return []
    vals = [float(v) for v in values][:positions] or [0.0]
    while len(vals) < positions:
        last = vals[-1]
        before = vals[-2] if len(vals) >= 2 else 1.0
        ratio = last / before if before > _TINY else 0.0
        vals.append(last * min(ratio, 1.0))
    return vals
