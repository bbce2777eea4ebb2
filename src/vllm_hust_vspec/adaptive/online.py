"""Online gamma controller: one cost posterior, one acceptance posterior, Thompson sampling.

A step's goodput per request at gamma ``g`` is ``E[g] / T(g)`` with ``E[g] = 1 + sum_{k<g}
p[k]``. Both factors are posteriors:

* ``T(g)`` from :class:`~.cost_posterior.CostPosterior`: a log load level and, per batch
  bucket, an affine step cost in (verified tokens, drafter depth), one small Kalman filter.
  A drafter-skipping gamma 0 is a row of the same model (the drafter terms zero), so every
  speculative step also teaches what skipping costs; nothing about gamma 0 is special-cased.
* ``p[k]`` from the discounted per-position counts of :class:`~.acceptance.AcceptanceModel`,
  read as a posterior: ``p[k]`` with the variance of a Beta of the counts it had when last
  measured, growing with the steps since (``_ACCEPTANCE_DRIFT``).

Each decision draws one sample of both (Thompson sampling, seeded; ``exploration`` scales its
width) and moves toward the sampled best arm, subject to hysteresis, ``max_gamma_step``, the
control interval and the token budget (a first decision the cost prior is sure of is not
held to ``max_gamma_step``: nothing has been played yet). Exploration therefore follows the
posterior: wide at a cold start (the first decisions visit the arms the data cannot yet tell
apart, no sweep), narrow once the arms are known, widening again while acceptance goes
unobserved at gamma 0 or the load drifts (no periodic re-checks, no acceptance probe). On a
host whose settled gamma 0 skips the drafter and pins the cohort (``zero_skips_drafter``),
gamma 0 is played only when the posterior says it is the best arm with probability
``_SETTLE_PROBABILITY``, now and at the batch the refills bring back, in the reading of what
the data cannot tell least favourable to it (:meth:`OnlineController._zero_is_best`); only
then is it settled. The same probability (in the plain reading) decides
``warmup_return='incumbent'``: the initial gamma is left only for an arm the posterior says
beats it with that probability.

The posterior's tuning constants below are private: each was measured on the simulator suite
and none is a deployment choice (the public knobs are :class:`~.online_config.OnlineConfig`).
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any

from ._limits import bucket_index, should_switch, step_toward
from .acceptance import AcceptanceModel
from .cadence import CadencedPolicy
from .cost_posterior import CostPosterior
from .cost_prior import CostPrior
from .cost_terms import PROMPT, TOKEN_UNIT, Row, price
from .feedback import ControllerSnapshot, StepFeedback
from .online_config import WARMUP_RETURNS, OnlineConfig

_INF = math.inf
_ACC_PRIOR_WEIGHT = 8.0  # AcceptanceModel's default prior weight for positions >= 1
_WIN_DRAWS = 64  # posterior draws behind P(an arm is best): +-0.04 at 0.9
# P(gamma 0 is best) to play a drafter-skipping zero: a pinned cohort cannot speculate again.
_SETTLE_PROBABILITY = 0.9
# Prior sd of the drafter's fixed overhead (first-step units): prices skipping until it is timed.
_OVERHEAD_SD = 0.05
# Per-step variance growth of a cost coefficient (share of its square): re-checks unplayed arms.
_COST_DRIFT = 1e-6
# Prior per-step variance growth of the load level (noise units), until the variogram has it.
_LOAD_DRIFT = 1.0
# Undrafted acceptance variance growth per step (sd 0.1 after 1,000): re-opens gamma 0 slowly.
_ACCEPTANCE_DRIFT = 1e-5
# p[0] before any verify feedback (deeper positions geometric): a middling drafter, soon replaced.
_PRIOR_ACCEPTANCE = 0.6
# Acceptance half-life clamp in steps: big batches may forget fast, small ones need the steps.
_ACC_MIN_HALFLIFE_STEPS = 4.0
_ACC_MAX_HALFLIFE_STEPS = 64.0
# Memory of the admission counts (steps): a workload's request lengths change slowly.
_ADMISSION_DECAY = 0.5 ** (1.0 / 512.0)
# Before the workload's own admissions are counted, a prior that timed admitting steps
# expects one every _ADMISSION_PRIOR_TOKENS committed tokens, with the weight of
# _ADMISSION_PRIOR_STEPS of them (decaying like the counts): speculation's share of admitting
# steps is priced from the first decision (an arm whose admitting steps leave the graphs is
# not explored at full price until the first requests finish), and the workload's own rate
# replaces the guess within a few admissions. Measured on the robustness family: 512-4096
# tokens give the same decisions within 1 %.
_ADMISSION_PRIOR_TOKENS = 1024.0
_ADMISSION_PRIOR_STEPS = 2.0
# Decisions the largest recent batch is remembered for (about a cohort's lifetime in steps):
# a pinned cohort runs on through the refills that bring the batch back up to it.
_HIGH_BATCH_MEMORY = 256


class OnlineController(CadencedPolicy):
    """Thompson sampling over a structured cost and acceptance posterior. ``Controller``.

    ``initial_gamma`` is the first gamma (None: ``max_gamma``). ``warmup_return`` (the
    0.14.3's ``--adaptive-online-warmup-return``) says how readily it is left: 'best' on
    the first draw that favours another arm, 'incumbent' only for an arm the posterior says
    beats it with probability ``_SETTLE_PROBABILITY`` (until the first such move).
    """

    def __init__(self, config: OnlineConfig | None = None, *,
                 cost_prior: CostPrior | None = None, initial_gamma: int | None = None,
                 warmup_return: str = "best") -> None:
        cfg = config or OnlineConfig()
        self.config = cfg
        lo, hi = cfg.min_gamma, cfg.max_gamma
        if warmup_return not in WARMUP_RETURNS:
            raise ValueError(f"OnlineController warmup_return must be one of "
                             f"{', '.join(WARMUP_RETURNS)}, got {warmup_return!r}")
        if initial_gamma is not None and (
                isinstance(initial_gamma, bool) or not isinstance(initial_gamma, int)
                or not lo <= initial_gamma <= hi):
            raise ValueError(f"OnlineController initial_gamma must be an int in "
                             f"[min_gamma={lo}, max_gamma={hi}], got {initial_gamma!r}")
        self.warmup_return = warmup_return
        initial = hi if initial_gamma is None else initial_gamma
        super().__init__(lo, hi, cfg.control_interval, initial, cfg.gamma_stride)
        self._skip_zero = cfg.zero_skips_drafter and lo == 0
        self._rng = random.Random(cfg.seed)
        self._width = cfg.exploration
        self._incumbent = warmup_return == "incumbent"  # until the first chosen switch
        self._measured: dict[tuple[int, int], deque[float]] = {}  # (bucket, gamma): tok/s/req
        self._cost = CostPosterior(hi, _OVERHEAD_SD, _LOAD_DRIFT, _COST_DRIFT)
        # Admitting steps per committed token and their mean prompt tokens per request
        # (discounted): how often an arm's steps pay the admission terms (module docstring).
        self._adm_steps = 0.0
        self._adm_tokens = 0.0
        self._adm_prompt = 0.0
        # ... and the host's own admitting steps per step (a pin's reading: _zero_is_best)
        self._adm_seen = 0.0
        self._adm_all = 0.0
        self._acc = AcceptanceModel(
            hi,
            prior=(_PRIOR_ACCEPTANCE,),
            prior_weight=_ACC_PRIOR_WEIGHT,
            halflife_requests=cfg.acceptance_halflife_requests,
            min_halflife_steps=_ACC_MIN_HALFLIFE_STEPS,
            max_halflife_steps=_ACC_MAX_HALFLIFE_STEPS,
        )
        self._warmup_left = cfg.warmup_samples
        self._prior_source = "none"
        self._prior_samples = 0
        if cost_prior is not None and cost_prior.samples:
            # shape only: the level is measured afresh, so a prior of dummy batches
            # (CostPrior.needs_anchor) needs no anchoring here
            self._prior_samples = self._cost.apply_prior(cost_prior)
            self._prior_source = cost_prior.source
            prompts = [s.prefill_tokens for s in cost_prior.samples if s.prefill_tokens > 0]
            if prompts:
                w = _ADMISSION_PRIOR_STEPS
                self._adm_steps = w
                self._adm_tokens = w * _ADMISSION_PRIOR_TOKENS
                self._adm_prompt = w * sum(prompts) / len(prompts)
        self._observations = 0
        self._skipped_nonsteady = 0
        self._skipped_transition = 0
        self._skipped_warmup = 0
        self._zero_confident = False  # last decision was a zero the posterior is sure of
        self._p_zero = 0.0
        self._visit = False  # the last decision switched arms
        self._row_cache: dict[tuple[int, int], tuple[list[Row], list[Row]]] = {}
        self._seen_n = [0.0] * hi  # per position: counts when last measured ...
        self._seen_t = [0] * hi  # ... and the observation it was measured in
        self._last_batch = 0
        self._last_bucket = 0
        self._last_cap = hi
        self._high_batch = 0  # the largest batch of the last _HIGH_BATCH_MEMORY decisions ...
        self._high_age = 0  # ... and the decisions since it was seen

    # -- Controller protocol ------------------------------------------------------------------

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from one completed step; the reward is attributed to ``feedback.gamma``."""
        self._observations += 1
        g = feedback.gamma
        shifts = self._acc.shifts
        if self._acc.observe(feedback):
            # Positions 0..g-1 were just measured: remember how precisely, and when.
            k = g if g < self._hi else self._hi
            weights = self._acc.weights()
            self._seen_n[:k] = weights[:k]
            self._seen_t[:k] = [self._observations] * k
            if self._acc.shifts != shifts:
                # The long memory was dropped: deeper positions are known no better than now.
                self._seen_n = [min(a, b) for a, b in zip(self._seen_n, weights, strict=True)]
        prefill = feedback.prefill_tokens if not feedback.steady else 0
        self._count_admissions(feedback.committed, prefill)
        if not feedback.steady and prefill <= 0:
            self._skipped_nonsteady += 1  # mixed, but its prompt work is not reported
            return
        batch = feedback.batch_size
        if feedback.interval_s <= 0.0 or batch <= 0 or g < self._lo or g > self._hi:
            return
        if self._warmup_left:
            self._warmup_left -= 1
            self._skipped_warmup += 1
            return
        if self._is_transition(feedback):
            self._skipped_transition += 1
            return
        self._cost.observe(feedback)
        if prefill:
            return
        idx = batch.bit_length() - 1 if batch > 1 else 0  # bucket_index, inlined (hot path)
        window = self._measured.get((idx, g))
        if window is None:
            window = self._measured[(idx, g)] = deque(maxlen=self.config.window)
        window.append(feedback.committed / (batch * feedback.interval_s))

    def _count_admissions(self, committed: int, prefill: int) -> None:
        """Discounted admitting steps per committed token and prompt tokens per admission:
        whatever the depth, requests finish (and new ones are admitted) at a rate per token
        the workload sets, so an arm's share of admitting steps follows from its tokens per
        step."""
        d = _ADMISSION_DECAY
        self._adm_tokens = self._adm_tokens * d + committed
        self._adm_steps *= d
        self._adm_prompt *= d
        self._adm_seen *= d
        self._adm_all = self._adm_all * d + 1.0
        if prefill > 0:
            self._adm_steps += 1.0
            self._adm_prompt += prefill
            self._adm_seen += 1.0

    @property
    def cost_model(self) -> CostPosterior:
        """The step-cost posterior (the refill hold and per-request lengths read it)."""
        return self._cost

    def settled(self) -> bool:
        """True when the last decision was a gamma 0 the posterior says is best with
        probability ``_SETTLE_PROBABILITY``: only then may a host pin a cohort on it."""
        if self._gamma != 0:
            return False
        if not self._skip_zero:
            # Not computed while deciding (nothing is pinned on this host): do it now.
            self._zero_confident, self._p_zero = self._zero_is_best()
        return self._zero_confident

    def report(self) -> ControllerSnapshot:
        """Posterior-mean goodput (tokens/s) of each eligible arm at the last batch."""
        goodput: dict[int, float] = {}
        if self._last_batch and self._cost.tau > 0.0:
            est = self._mean_goodput(self._last_batch, self._last_cap)
            for i, e in enumerate(est):
                goodput[self._lo + i] = e
        return ControllerSnapshot("online", self._gamma, goodput)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state: decisions, skipped steps, the prior, the posteriors."""
        out: dict[str, Any] = {
            "policy": "online",
            "gamma": self._gamma,
            "phase": "warmup" if self._warmup_left and not self._prior_samples else "exploit",
            "cost_prior": self._prior_source,
            "cost_prior_samples": self._prior_samples,
            "batch_size": self._last_batch,
            "bucket": 1 << self._last_bucket,
            "decisions": self._calls,
            "observations": self._observations,
            "switches": self._switches,
            "skipped_warmup": self._skipped_warmup,
            "skipped_nonsteady": self._skipped_nonsteady,
            "skipped_transition": self._skipped_transition,
            "p_zero_best": round(self._p_zero, 4),
            "buckets": [1 << b for b in self._cost.buckets()],
            "load_level": round(self._cost.level, 4),
            "noise_r": self._cost.r,
        }
        arms: list[dict[str, Any]] = []
        if self._last_batch and self._cost.tau > 0.0:
            out["coefficients_s"] = self._cost.coefficients(self._last_bucket)
            est = self._mean_goodput(self._last_batch, self._hi)
            for i, e in enumerate(est):
                g = self._lo + i
                window = self._measured.get((self._last_bucket, g))
                arms.append({"gamma": g, "eligible": g <= self._last_cap,
                             "estimated_goodput": e,
                             "measured_goodput": (sum(window) / len(window) * self._last_batch
                                                  if window else None),
                             "samples": len(window) if window else 0})
        out["arms"] = arms
        out.update(self._acc.snapshot())
        return out

    # -- decisions ----------------------------------------------------------------------------

    @property
    def gamma(self) -> int:
        """The last decision."""
        return self._gamma

    def _rows(self, batch: int, cap: int) -> tuple[list[Row], list[Row]]:
        """Regression rows of the arms ``lo..cap`` at ``batch`` (arm 0 as the host runs it):
        a decode-only step, and the same step admitting one unit of prompt tokens (scaled to
        the measured mean when scored)."""
        key = (batch, cap)
        rows = self._row_cache.get(key)
        if rows is None:
            skip = self._skip_zero
            cost = self._cost
            arms = range(self._lo, cap + 1)
            unit = int(TOKEN_UNIT)
            rows = ([cost.row(batch, batch * (1 + g), g, not (skip and g == 0)) for g in arms],
                    [cost.row(batch, batch * (1 + g), g, not (skip and g == 0), unit)
                     for g in arms])
            if len(self._row_cache) < 4096:
                self._row_cache[key] = rows
        return rows

    def _admission_mix(self, batch: int) -> tuple[float, float]:
        """(admitting steps per committed token times ``batch``, prompt units per admitting
        step): an arm committing ``E`` tokens per request admits on ``E`` times the first
        value's share of its steps."""
        if self._adm_steps <= 0.0 or self._adm_tokens <= 0.0:
            return 0.0, 0.0
        return (batch * self._adm_steps / self._adm_tokens,
                self._adm_prompt / self._adm_steps / TOKEN_UNIT)

    def _step_costs(self, steady: list[float], admitting: list[float],
                    expected: list[float], batch: int, prompt_cost: float,
                    floor: float = 0.0) -> list[float]:
        """Expected load-free cost of a step of each arm: decode-only, or admitting on the
        share of its steps its tokens per step imply, the lowest arm's at least ``floor``
        (``admitting`` priced at one prompt unit; the measured mean replaces it at
        ``prompt_cost`` per unit)."""
        rate, prompt = self._admission_mix(batch)
        if rate <= 0.0:
            return steady
        lo = self._lo
        out = []
        for i, (fs, fa) in enumerate(zip(steady, admitting, strict=True)):
            share = rate * expected[lo + i]
            if share > 1.0:
                share = 1.0
            elif share < floor and not i:
                share = floor
            out.append(fs + share * (fa - fs + prompt_cost * (prompt - 1.0)))
        return out

    def _mean_goodput(self, batch: int, cap: int) -> list[float]:
        idx = bucket_index(batch)
        steady, admitting = self._rows(batch, cap)
        expected = self._acc.expected_committed()
        theta = self._cost.theta(idx)
        costs = self._step_costs(price(theta, steady), price(theta, admitting), expected,
                                 batch, theta[PROMPT])
        lo = self._lo
        return [batch * expected[lo + i] / self._cost.seconds(f) for i, f in enumerate(costs)]

    def _choose(self, batch: int, cap: int, cur: int) -> int:
        """One decision; ``cur`` is the current gamma already capped by the budget."""
        idx = bucket_index(batch)
        self._last_batch = batch
        self._last_bucket = idx
        self._last_cap = cap
        self._high_age += 1
        if batch >= self._high_batch or self._high_age > _HIGH_BATCH_MEMORY:
            self._high_batch, self._high_age = batch, 0
        if self._cost.tau <= 0.0 or (self._warmup_left and not self._prior_samples):
            return cur  # nothing to judge by yet (a prior decides from the first step)
        if self._visit:
            # The first step at a new arm mixes two arms (a transition step, never timed):
            # every arm moved to is held one more decision, a stop on the way to a far target
            # (max_gamma_step) too, so each move yields a clean sample before the next draw.
            # (Re-drawing at once had the controller bounce between gamma 4 and 2 on the
            # sticky host, learning nothing from the stops; walking on to the far target
            # without looking made every probe from gamma 0 at batch 256 a long one.)
            self._visit = False
            if cur == self._gamma:
                return cur
        self._zero_confident = False
        lo = self._lo
        rows = self._row_cache.get((batch, cap)) or self._rows(batch, cap)
        score = self._draw_scores(idx, rows, self._width)
        self._off_grid(score)
        if self._skip_zero and (cur == 0 or max(score) == score[0]):
            # Playing a drafter-skipping zero pins the running cohort for its lifetime: only
            # when the posterior is sure, else arm 0 is out of this decision.
            self._zero_confident, self._p_zero = self._zero_is_best()
            if not self._zero_confident:
                score[0] = -_INF
        best = score.index(max(score))
        cur_i = cur - lo
        stay = best == cur_i or not should_switch(score[best], score[cur_i],
                                                  self.config.hysteresis)
        if stay and score[cur_i] > -_INF:
            return cur
        sure = False
        if self._incumbent and score[cur_i] > -_INF:
            if not self._wins(best, cur_i)[0]:
                return cur  # the challenger is not known to be better
            self._incumbent = False
            sure = True
        self._visit = True
        target = best + lo
        if not self._observations and abs(target - cur) > self.config.max_gamma_step and (
                sure or (best == 0 and self._zero_confident) or self._wins(best, cur_i)[0]):
            # Nothing has been played yet (a prior decides the first step), so the initial
            # gamma is a placeholder: a choice the prior is sure beats it (a zero: beats every
            # arm) is played at once. An unsure first draw still walks, stopping on the way at
            # arms that measure more positions than the target.
            return target
        return step_toward(cur, target, self.config.max_gamma_step)

    def _draw_scores(self, idx: int, rows: tuple[list[Row], list[Row]],
                     width: float = 1.0, pin: bool = False, batch: int = 0) -> list[float]:
        """One joint draw of every eligible arm's score (committed tokens per request over its
        load-free cost) from the posteriors of bucket ``idx``, ``width`` sds wide, at
        ``batch`` (0: the last decision's), in a pin's reading when ``pin`` (see
        :meth:`_zero_is_best`)."""
        steady, admitting = rows
        theta = self._cost.sample_theta(idx, self._rng, width, self._adm_steps > 0.0)
        expected = self._sample_expected(width, pin)
        costs = price(theta, steady)
        if self._adm_steps > 0.0:
            floor = self._adm_seen / self._adm_all if pin and self._adm_all > 0.0 else 0.0
            costs = self._step_costs(costs, price(theta, admitting), expected,
                                     batch or self._last_batch, theta[PROMPT], floor)
        lo = self._lo
        return [expected[lo + i] / f for i, f in enumerate(costs)]

    def _sample_expected(self, width: float = 1.0,
                         unmeasured_accepted: bool = False) -> list[float]:
        """One draw of ``E[g]`` for g = 0..max (``unmeasured_accepted``: a position never
        verified is taken as accepting every draft that reaches it). Position ``k``'s rate has
        the variance of a Beta of the (discounted) counts it had when last measured, grown by
        ``_ACCEPTANCE_DRIFT`` per step since (times ``p[k-1]`` squared for the steps the
        position below was measured and this one not; on top of the drift of the position
        below); every position moves by the same normal draw (sd ``width``) times its sd (a
        drafter that agrees more agrees more at every depth)."""
        p = self._acc.probabilities()
        z = self._rng.gauss(0.0, width)
        drift = _ACCEPTANCE_DRIFT
        now = self._observations
        seen_n, seen_t = self._seen_n, self._seen_t
        out = [1.0]
        acc = 1.0
        prev = 1.0
        # A position inherits the drift of the one below (what moves that one moves it) and
        # adds its conditional rate's for the steps since it was measured while the one
        # below still was, which moves it by the rate of reaching it: at gamma 0 every
        # position drifts alike, at gamma 1 position 1 only by p[0]^2 as much.
        below = 0  # steps since the position below was measured
        steps = 0.0  # the drift of the position below, in steps of _ACCEPTANCE_DRIFT
        reach = 1.0
        for k, pk in enumerate(p):
            w = seen_n[k] + (_ACC_PRIOR_WEIGHT if k else 1.0)
            age = now - seen_t[k]
            steps += (age - below) * reach * reach
            v = pk + z * math.sqrt(pk * (1.0 - pk) / w + drift * steps)
            if unmeasured_accepted and not seen_t[k]:
                v = prev
            v = 0.0 if v < 0.0 else prev if v > prev else v
            prev = v
            reach = pk
            below = age
            acc += v
            out.append(acc)
        return out

    def _zero_is_best(self) -> tuple[bool, float]:
        """Whether gamma 0 beats every other eligible arm with probability
        ``_SETTLE_PROBABILITY`` under the posterior, and the share of draws it won, at the
        current batch and at the largest batch of the last ``_HIGH_BATCH_MEMORY`` decisions:
        a pinned cohort runs on at the batch the refills bring back, so a zero that wins only
        while the batch is down (or only where a rarely seen bucket misprices it) is not
        pinned."""
        if self._lo != 0:
            return False, 0.0
        # A pin must win in the reading of what the data cannot tell least favourable to it:
        # acceptance at a position never verified is a guess, not a measurement, so every
        # draft there is taken as accepted; and the zero admits on as large a share of its
        # steps as measured, not a smaller one by its tokens per step (a refill hold capped
        # in steps admits per step, whatever the depth).
        sure, share = self._wins(0, pin=True)
        high = self._high_batch
        if sure and high > self._last_batch:
            sure, at_high = self._wins(0, pin=True, batch=high)
            share = min(share, at_high)
        return sure, share

    def _wins(self, arm: int, rival: int | None = None,
              pin: bool = False, batch: int = 0) -> tuple[bool, float]:
        """Whether arm index ``arm`` (gamma ``lo + arm``) beats arm ``rival`` (every other
        eligible arm when None) at ``batch`` (0: the last decision's) with probability
        ``_SETTLE_PROBABILITY`` under the posterior, and the share of the draws made that it
        won. Monte Carlo over at most ``_WIN_DRAWS``
        joint draws of costs and acceptance (the arms' errors are strongly correlated,
        through the shared coefficients and acceptance, so no bound on pairwise probabilities
        is tight; ``pin``: see :meth:`_draw_scores`), stopped as soon as the
        remaining draws cannot change the answer: a clear
        "no" (the common case while speculating) takes a handful. Only run when a zero, a
        move off the incumbent or a first decision beyond ``max_gamma_step`` is contemplated."""
        batch, cap = batch or self._last_batch, self._last_cap
        if batch <= 0 or self._cost.tau <= 0.0:
            return False, 0.0
        if cap == self._lo:
            return True, 1.0
        need = math.ceil(_SETTLE_PROBABILITY * _WIN_DRAWS - 1e-9)
        idx = bucket_index(batch)
        rows = self._rows(batch, cap)
        wins = losses = 0
        while wins < need and losses <= _WIN_DRAWS - need:
            score = self._draw_scores(idx, rows, pin=pin, batch=batch)
            mine = score[arm]
            if rival is not None:
                won = score[rival] < mine
            else:
                won = all(v < mine for i, v in enumerate(score) if i != arm)
            if won:
                wins += 1
            else:
                losses += 1
        return wins >= need, wins / (wins + losses)


__all__ = ["OnlineController"]
