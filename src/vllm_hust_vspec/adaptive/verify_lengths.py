"""Per-request verify lengths: share a step's verified tokens by how likely drafts survive.

A batch-uniform controller drafts depth ``D`` for every request and verifies all of it. When
requests differ (a completion the drafter copies beside a turn it guesses) the deep drafts of
a hard request are nearly worthless while costing the target as much as an easy request's.
:class:`PerRequestLengths` models each request ``i``'s draft at position ``k`` as accepted
(given the drafts before it) with probability ``alpha_i * rho_k``, ``alpha_i = m * phi_i``:

* ``m``: the batch's common rate now, pooled over every request's tried positions with a short
  half-life (``rate_halflife``): what all requests share moves it (a phase of prose after one
  of code, a drafter that drifts), not any one request's history;
* ``phi_i``: the request's own factor over ``m``, its discounted accepted over the accepted
  ``m`` predicted for the positions it tried (a verify of ``d`` drafts with ``a`` accepted
  tried positions ``0..min(a, d-1)``; position ``k`` predicts ``m_t * rho_k``), shrunk toward
  1 while the request is young. A shift every request makes together leaves the factors at
  1, so the batch is not mistaken for a mix of easy and hard requests while histories catch up;
* ``rho_k``: the positional profile (``rho_0 = 1``), accepted over *expected* at each position
  given who tried it, so that deep positions, tried mostly by easy requests once lengths are
  trimmed, are not mistaken for easy positions.

Verifying slot ``(i, k)`` buys its survival ``S_i(k) = prod_{j <= k} alpha_i rho_j`` tokens. A
step's time comes from the one step-cost model (adaptive/cost_posterior.py: a verified token's
own cost ``c_v`` apart from a drafter pass, learned from trimmed steps or the target timed
alone), so the goodput of verifying the ``n`` best slots is ``(B + their S) / T``, best where a
slot stops being worth ``c_v`` times the goodput: slots are admitted above ``tau = c_v * G`` (a
fixed point, two iterations). Survival decreases along a request, so each request verifies a
prefix. The depth ``D`` is rated by the same model (see :class:`PerRequestController`).

:class:`PerRequestController` uses that once ``c_v`` is known (to 25%), and the
wrapped batch controller's decision before, and always when the batch controller settles at
gamma 0 (speculation off stays off). Requests are grouped by ``log phi_i`` on a grid
(``_GRID``) so a decision costs one survival walk per group plus O(batch) dictionary work.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable
from dataclasses import dataclass
from typing import Any

from ._limits import bucket_index
from ._validate import require_float
from .cost_posterior import CostPosterior, model_of
from .cost_prior import CostPrior
from .feedback import ControllerSnapshot, StepFeedback, VerifyQuery

_GRID = 0.1  # log-rate resolution of the request groups
_PER_GRID = 1.0 / _GRID
_Q_MAX = 0.995  # no position is certain
_EVICT_EVERY = 64  # steps between sweeps of requests no longer seen
_DISPERSION_MIN_TRIED = 8.0  # tried positions a request needs to enter the dispersion test
_COST_REL_SE = 0.25  # relative standard error below which a verified token's cost is known
_PROBE_EVERY = 8  # while unidentified, every 8th verify checks half of each request's drafts
_REFRESH_EVERY = 16  # steps between runs of the dispersion test
_NEWCOMER = 0  # group of a request not seen yet: factor 1 (the batch's rate)


@dataclass(frozen=True, slots=True)
class LengthsConfig:
    """Knobs of :class:`PerRequestLengths`."""

    # Tried positions of batch-mean acceptance a request's own rate is shrunk toward: about
    # this many tried positions before its own history outweighs the batch.
    prior_positions: float = 8.0
    # Half-life, in tried positions, of a request's own history (requests drift too).
    request_halflife: float = 64.0
    # Half-life, in tried positions over the whole batch, of the common rate ``m``.
    rate_halflife: float = 256.0
    # Half-life, in steps, of the positional profile.
    batch_halflife: float = 256.0
    # Relative modelled gain a trimmed step (or a depth other than the batch controller's)
    # must show over the plain one before it is played.
    margin: float = 0.02
    # Per-request lengths act only while requests differ beyond chance: the variance across
    # requests of their accepted drafts' deviation from what the batch's rate predicted, in
    # units of binomial noise, must exceed this (below 1 for identical requests). Otherwise
    # the batch controller decides alone, exactly as without this layer.
    dispersion_threshold: float = 3.0

    def __post_init__(self) -> None:
        require_float(self, "margin", 0.0, 1.0)
        require_float(self, "dispersion_threshold", 0.0, math.inf)
        require_float(self, "prior_positions", 0.0, math.inf)
        require_float(self, "request_halflife", 1.0, math.inf)
        require_float(self, "rate_halflife", 1.0, math.inf)
        require_float(self, "batch_halflife", 1.0, math.inf)


def _group_key(factor: float) -> int:
    """The request group of factor ``phi``: its log on the ``_GRID``."""
    return round(math.log(max(factor, 1e-6)) * _PER_GRID)


class _LengthCost:
    """What the lengths read of the step-cost model (:class:`~.cost_posterior.CostPosterior`,
    the batch controller's when it has one, fed by it; else an own one fed here): what one
    more verified token costs on its own, and a step's time at a depth and a verified count."""

    __slots__ = ("batch", "model", "owns")

    def __init__(self, model: CostPosterior, owns: bool) -> None:
        self.model = model
        self.owns = owns
        self.batch = 0  # of the last step seen

    def observe(self, fb: StepFeedback) -> None:
        self.batch = fb.batch_size
        if self.owns and fb.next_gamma in (None, fb.gamma):
            self.model.observe(fb)

    def per_token(self) -> tuple[float, float]:
        """Seconds a verified token costs on its own, and its sd (0, inf before a step)."""
        model = self.model
        if self.batch <= 0 or model.tau <= 0.0:
            return 0.0, math.inf
        return model.verify_token_cost(bucket_index(self.batch))

    @property
    def known(self) -> bool:
        """True when a verified token's cost is known to within ``_COST_REL_SE`` of itself
        (a trimmed step, or the target timed alone, separates it from a drafter pass)."""
        mean, sd = self.per_token()
        return mean > 0.0 and sd < _COST_REL_SE * mean

    def time(self, verified: float, depth: int, batch: int) -> float:
        """Model seconds of a step of ``batch`` requests verifying ``verified`` tokens at
        draft depth ``depth``."""
        model = self.model
        idx = bucket_index(batch)
        return model.seconds(model.mean_costs(idx, [model.row(batch, verified, depth)])[0])


class PerRequestLengths:
    """Survival per request and the length / depth rule (see the module docstring)."""

    def __init__(self, max_gamma: int, config: LengthsConfig | None = None,
                 cost_prior: CostPrior | None = None,
                 cost_model: CostPosterior | None = None) -> None:
        """``cost_model``: the batch controller's step-cost model (it feeds it); without one
        the lengths keep their own, started from ``cost_prior`` (start-up step times, whose
        target-alone times identify a verified token's cost before the real steps can)."""
        self.config = cfg = config or LengthsConfig()
        self.margin = cfg.margin
        self.max_gamma = max_gamma
        # id -> [accepted, accepted m predicted, last step, group key]
        self._req: dict[Hashable, list[float]] = {}
        rd = 0.5 ** (1.0 / cfg.request_halflife)
        self._req_decay = [rd ** k for k in range(max_gamma + 1)]  # by positions tried
        self._rate_decay = 0.5 ** (1.0 / cfg.rate_halflife)  # per tried position
        self._rate_num = self._rate_den = 0.0  # discounted accepted, and predicted at m = 1
        self._pos_decay = 0.5 ** (1.0 / cfg.batch_halflife)
        self._pos_acc = [0.0] * max_gamma
        self._pos_exp = [0.0] * max_gamma  # sum of alpha_i over the requests that tried k
        self._rho = [1.0] * max_gamma
        self._cum_rho = [float(k) for k in range(max_gamma + 1)]  # [0, rho_0, rho_0+rho_1..]
        self._curves: dict[int, list[float]] = {}  # group -> cumulative survival (this step)
        self._rate = 0.6  # m
        if cost_model is None:
            cost_model = CostPosterior(max_gamma)
            if cost_prior is not None:
                cost_model.apply_prior(cost_prior)
            self._cost = _LengthCost(cost_model, True)
        else:
            self._cost = _LengthCost(cost_model, False)
        self._step = 0
        self._batch_keys: list[int] = []  # groups of the last verify's requests
        self._batch_ids: tuple[Hashable, ...] = ()  # ... and their ids
        self.trimmed = 0  # drafts left unverified, for reports
        self.verified = 0
        self.dispersion = 1.0
        self.heterogeneous = False
        self._verifies = 0
        self.probes = 0

    @property
    def ready(self) -> bool:
        """True once requests differ beyond chance and the cost model is fitted, identified
        and says verified tokens cost something."""
        return self.heterogeneous and self._cost.known

    # -- learning -----------------------------------------------------------------------------
    def alpha(self, rid: Hashable) -> float:
        """Request ``rid``'s acceptance rate ``m * phi`` (``m`` for an unknown request)."""
        st = self._req.get(rid)
        return self._rate if st is None else self._rate * self._shrunk(st)

    def _shrunk(self, st: list[float]) -> float:
        """A request's factor ``phi`` shrunk toward 1 (``observe`` inlines it: it runs for
        every request of every step)."""
        pm = self.config.prior_positions * self._rate
        return (st[0] + pm) / (st[1] + pm)

    def observe(self, fb: StepFeedback) -> None:
        """Fold in one verified step: per-request acceptance, positional profile, cost."""
        self._step += 1
        step = float(self._step)
        ids = fb.request_ids
        rho = self._rho
        depth = len(rho)
        m = self._rate
        pm = self.config.prior_positions * m  # the factor's prior, in predicted accepted
        decay = self._req_decay
        table = self._req
        # per position: accepted, and the summed factor of the requests that tried it, built
        # from per-"tried count" sums (O(batch + depth))
        phi_by_tried = [0.0] * (depth + 1)
        acc_hist = [0] * (depth + 1)
        cum_rho = self._cum_rho
        n_tried = 0
        log = math.log
        get = table.get
        rids = ids if ids is not None else (None,) * len(fb.drafted)
        # a request's group is read only while requests differ (it is what lengths() and
        # depth_steps() walk); a homogeneous batch skips the log (_refresh_batch catches up)
        keyed = self.heterogeneous
        for rid, d, a in zip(rids, fb.drafted, fb.accepted, strict=True):
            if d <= 0:
                continue
            tried = a + 1 if a < d else a
            if tried > depth:
                tried = depth
            n_tried += tried
            acc_hist[a if a < depth else depth] += 1
            st = None if rid is None else get(rid)
            if st is None:
                phi_by_tried[tried] += 1.0
                if rid is None:
                    continue
                s0, s1 = float(a), m * cum_rho[tried]
                st = table[rid] = [s0, s1, step, 0.0]
            else:
                s0, s1 = st[0], st[1]
                phi_by_tried[tried] += (s0 + pm) / (s1 + pm)
                w = decay[tried]
                st[0] = s0 = s0 * w + a
                st[1] = s1 = s1 * w + m * cum_rho[tried]
                st[2] = step
            if keyed:
                x = (s0 + pm) / (s1 + pm)
                st[3] = round(log(x if x > 1e-6 else 1e-6) * _PER_GRID)  # _group_key, inlined
        pd = self._pos_decay
        pos_acc, pos_exp = self._pos_acc, self._pos_exp
        tried_beyond = accepted_beyond = 0.0
        predicted = accepted = 0.0  # this step's accepted, and what m = 1 would predict
        for k in range(depth - 1, -1, -1):
            tried_beyond += phi_by_tried[k + 1]
            accepted_beyond += acc_hist[k + 1]
            predicted += phi_by_tried[k + 1] * cum_rho[k + 1]
            accepted += accepted_beyond
            pos_acc[k] = pos_acc[k] * pd + accepted_beyond
            pos_exp[k] = pos_exp[k] * pd + m * tried_beyond
        if n_tried:
            w = self._rate_decay ** n_tried
            self._rate_num = self._rate_num * w + accepted
            self._rate_den = self._rate_den * w + predicted
            if self._rate_den > 1.0:
                self._rate = min(_Q_MAX, max(1e-3, self._rate_num / self._rate_den))
        base = pos_acc[0] / pos_exp[0] if pos_exp[0] > 1.0 else 1.0
        for k in range(1, depth):
            if pos_exp[k] > 1.0 and base > 0.0:
                rho[k] = min(1.5, pos_acc[k] / pos_exp[k] / base)
        for k in range(depth):
            cum_rho[k + 1] = cum_rho[k] + rho[k]
        self._curves.clear()
        self._cost.observe(fb)
        if self._step % _REFRESH_EVERY == 0 and table:
            self._refresh_batch(table.values())
        if self._step % _EVICT_EVERY == 0:
            stale = step - _EVICT_EVERY
            for rid in [r for r, st in table.items() if st[2] < stale]:
                del table[rid]

    def _refresh_batch(self, batch: Collection[list[float]]) -> None:
        """Whether requests differ beyond chance: the variance across requests of their
        accepted counts' deviations from what ``m`` predicted, in units of binomial noise,
        over the requests seen in the last ``_EVICT_EVERY`` steps. Centred: a deviation all
        requests share (``m`` lagging a shift) is the batch's, not a difference between
        them."""
        m = self._rate
        q = 1.0 - m
        least = _DISPERSION_MIN_TRIED * m
        z = [(st[0] - st[1]) / math.sqrt(st[1] * q) for st in batch if st[1] >= least]
        if len(z) > 1 and q > 0.0:
            mean = sum(z) / len(z)
            self.dispersion = sum(x * x for x in z) / len(z) - mean * mean
        else:
            self.dispersion = 1.0
        was = self.heterogeneous
        self.heterogeneous = self.dispersion > self.config.dispersion_threshold
        if self.heterogeneous and not was:
            for st in batch:  # observe() kept no groups while the batch was homogeneous
                st[3] = float(_group_key(self._shrunk(st)))
            self._batch_keys = self._keys(self._batch_ids)  # what depth_steps() reads

    # -- the rule -----------------------------------------------------------------------------
    def _survival(self, key: int) -> list[float]:
        """Cumulative survival sums ``[0, S(0), S(0)+S(1), ...]`` of a group's drafts, to
        the maximum depth (cached until the next observe)."""
        cum = self._curves.get(key)
        if cum is None:
            a = self._rate * math.exp(key * _GRID)
            cum, s = [0.0], 1.0
            for r in self._rho:
                s *= min(_Q_MAX, a * r)
                cum.append(cum[-1] + s)
            self._curves[key] = cum
        return cum

    def _trim(self, cells: dict[tuple[int, int], int], depth: int,
              rounds: int = 3) -> tuple[dict[tuple[int, int], int], float, float]:
        """Lengths at the goodput fixed point for ``cells`` ((group, drafts) -> requests):
        ((group, drafts) -> length, expected tokens, model seconds). The first round verifies
        everything (``rounds=1``: the untrimmed step)."""
        batch = sum(cells.values())
        c_v = self._cost.per_token()[0]
        curves = {key: self._survival(key) for key, _ in cells}
        out: dict[tuple[int, int], int] = {}
        tau = 0.0
        value = seconds = 0.0
        for _ in range(rounds):
            value, n = float(batch), 0
            for (key, cap), count in cells.items():
                cum = curves[key]
                keep = 0
                while keep < cap and cum[keep + 1] - cum[keep] >= tau:
                    keep += 1
                out[(key, cap)] = keep
                n += keep * count
                value += cum[keep] * count
            seconds = max(self._cost.time(batch + n, depth, batch), 1e-9)
            tau = c_v * value / seconds
        return out, value, seconds

    def _keys(self, ids: tuple[Hashable, ...]) -> list[int]:
        """The groups of requests ``ids`` (``_NEWCOMER`` for an unknown request)."""
        return [_NEWCOMER if st is None else int(st[3]) for st in map(self._req.get, ids)]

    def lengths(self, query: VerifyQuery) -> list[int]:
        """How many of each request's drafts to verify (each at most its drafts)."""
        drafted = query.drafted
        depth = max(drafted, default=0)
        self._batch_ids = query.request_ids
        self._batch_keys = keys = self._keys(query.request_ids)
        if depth <= 0:
            return list(drafted)
        if not self.ready:
            self._verifies += 1
            if (self.heterogeneous and not self._cost.known
                    and self._verifies % _PROBE_EVERY == 0):
                # a probe: verified tokens must vary apart from batch x depth once for their
                # cost to be learned (greedy outputs never change; a few drafts go unchecked)
                self.probes += 1
                return [(d + 1) // 2 for d in drafted]
            return list(drafted)
        cells: dict[tuple[int, int], int] = {}
        for key, cap in zip(keys, drafted, strict=True):
            cells[(key, cap)] = cells.get((key, cap), 0) + 1
        trimmed, value, seconds = self._trim(cells, depth)
        _, full_value, full_seconds = self._trim(cells, depth, rounds=1)
        # Trim only for a clear modelled gain: on a homogeneous batch the depth already priced
        # verification, and trimming would cut a partial last position while skewing what the
        # batch controller learns about deep positions (only easy requests would reach them).
        if value / seconds < (1.0 + self.margin) * full_value / full_seconds:
            out = list(drafted)
        else:
            out = [trimmed[(key, cap)] for key, cap in zip(keys, drafted, strict=True)]
        n = sum(out)
        self.trimmed += sum(drafted) - n
        self.verified += n
        return out

    def depth_steps(self, batch_size: int, lo: int, hi: int) -> list[tuple[float, float]]:
        """(expected tokens, model seconds) of a trimmed step at each depth ``lo..hi``, for
        the requests of the last verify (newcomers at the batch's rate)."""
        counts: dict[int, int] = {}
        for key in self._batch_keys[:batch_size]:
            counts[key] = counts.get(key, 0) + 1
        extra = batch_size - sum(counts.values())
        if extra > 0:
            counts[_NEWCOMER] = counts.get(_NEWCOMER, 0) + extra
        out = []
        for d in range(lo, hi + 1):
            if d == 0:
                out.append((float(batch_size), self._cost.time(batch_size, 0, batch_size)))
            else:
                _, value, seconds = self._trim({(k, d): c for k, c in counts.items()}, d)
                out.append((value, seconds))
        return out

    def snapshot(self) -> dict[str, Any]:
        """Counts for reports."""
        total = self.trimmed + self.verified
        c_v = self._cost.per_token()[0]
        return {"requests_tracked": len(self._req),
                "verified_share": self.verified / total if total else 1.0,
                "verify_token_cost_s": c_v if c_v > 0.0 else None,
                "batch_rate": round(self._rate, 4),
                "dispersion": round(self.dispersion, 3),
                "cost_identified": self._cost.known,
                "probes": self.probes,
                "position_profile": [round(r, 3) for r in self._rho]}


class PerRequestController:
    """Draft depth and per-request verify lengths around a batch controller.

    The batch controller decides the depth; once the cost model is identified, a depth whose
    trimmed step the model rates ``LengthsConfig.margin`` better than the batch controller's choice
    replaces it (never when the batch controller chooses gamma 0). Both learn from every
    step, the batch controller's acceptance counts except from a trimmed step (the host marks
    it, ``StepFeedback.lengths_trimmed``: only easy requests tried its deep positions). The
    batch controller's own exploration (a Thompson draw) is overridden the same way: its arm
    times were measured under other lengths and cannot rank trimmed steps.
    """

    def __init__(self, inner: Any, min_gamma: int, max_gamma: int,
                 config: LengthsConfig | None = None,
                 cost_prior: CostPrior | None = None) -> None:
        self.inner = inner
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.lengths = PerRequestLengths(max_gamma, config, cost_prior, model_of(inner))
        self.depth_decisions = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The draft depth."""
        g = int(self.inner.decide(batch_size, token_budget))
        if not self.lengths.ready:
            return g  # not identified yet: the batch controller's decision
        lo = self.min_gamma
        hi = min(self.max_gamma, max(0, token_budget // max(batch_size, 1) - 1))
        if g == 0 or not lo <= g <= hi:
            return g  # speculation off is the batch controller's call (a sticky host pins it)
        # Scored by this layer's model of the trimmed step at each depth: the batch
        # controller's arm times were measured under other lengths (before trimming began,
        # or at another depth's trimming) and would misrank depths.
        score = [v / t if t > 0.0 else 0.0
                 for v, t in self.lengths.depth_steps(batch_size, lo, hi)]
        # never down to gamma 0 either
        first = 1 if lo == 0 else lo
        best = max(range(first - lo, len(score)), key=score.__getitem__, default=g - lo)
        if best + lo != g and score[best] > (1.0 + self.lengths.margin) * score[g - lo]:
            self.depth_decisions += 1
            return best + lo
        return g

    def verify_lengths(self, query: VerifyQuery) -> list[int]:
        """Per-request verify lengths (see :class:`PerRequestLengths`)."""
        return self.lengths.lengths(query)

    def observe(self, feedback: StepFeedback) -> None:
        """Both layers learn from the step."""
        self.inner.observe(feedback)
        self.lengths.observe(feedback)

    def settled(self) -> bool:
        """The batch controller's."""
        return bool(self.inner.settled())

    def report(self) -> ControllerSnapshot:
        """The batch controller's."""
        rep: ControllerSnapshot = self.inner.report()
        return rep

    def snapshot(self) -> dict[str, Any]:
        """The batch controller's state plus the per-request layer's."""
        snap = dict(self.inner.snapshot())
        snap["per_request"] = {**self.lengths.snapshot(),
                               "depth_decisions": self.depth_decisions}
        return snap


__all__ = ["LengthsConfig", "PerRequestController", "PerRequestLengths"]
