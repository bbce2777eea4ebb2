"""UCB1 online policy: vllm-hust-vSpec 0.14.3's gamma rule, decision for decision.

Rewards are measured, not modelled: an arm (a gamma) in a power-of-two batch bucket earns the
committed tokens over the milliseconds of its last ``window`` steady steps (no admission in the
step, the verified width equal to the scheduled one). The rule, in the order it is applied at
each scheduler step:

1. the token budget and per-arm batch limits leave the feasible arms; a current arm that is no
   longer feasible gives way to the largest feasible one;
2. entering another bucket resumes at its transferred target, its best measured arm or the
   anchor (the graph-backed ``initial_gamma``, else the middle arm);
3. a range that includes 0 and spans >= 4 stays at the anchor for ``8 x window`` samples
   before anything else is tried;
4. a pending bucket-transfer or first-visit target is walked to, ``max_gamma_step`` at a time;
5. an arm is held ``control_interval`` steps (``warmup_samples + inflight_padding`` on a first
   visit);
6. with an anchor: wait at it for its first samples, and at the best measured arm while a
   probe's samples are still owed; an arm not yet visited is opened only from a measured
   neighbour whose modelled reward (acceptance rates x shared cost in drafter passes) beats
   the best by ``max(hysteresis, exploration)``; otherwise the anchor is re-measured for a
   window and the unvisited arms stay closed;
7. otherwise visit the nearest unvisited arm; wait at the middle arm while visited arms owe
   samples; then return once to the best arm (or the anchor, ``warmup_return``);
8. from then on, UCB1: mean + exploration x best mean x sqrt(2 ln(N + 1) / n), moving only
   when the best score beats the current one by ``hysteresis``.

A bucket first met while the batch drains borrows the arms of the bucket twice its size as a
prior (scaled by the batch ratio, weight ``warmup_samples``), starts at that bucket's preferred
arm, and skips its own visits when that bucket finished them. Every gamma-0 decision counts as
settled: 0.14.3 pinned the cohort at any zero it chose.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from .feedback import ControllerSnapshot, StepFeedback
from .ucb_config import UcbConfig

# Request ids remembered for the second-draft transition counts (oldest dropped beyond it).
_MAX_TRACKED_REQUESTS = 1 << 16


def batch_bucket(batch_size: int) -> int:
    """The smallest power of two >= ``batch_size`` (the bucket key; 1 for 0 or less)."""
    return 1 << (max(batch_size, 1) - 1).bit_length()


def _nearest(candidates: list[int] | tuple[int, ...] | set[int], target: float) -> int:
    """The candidate closest to ``target``; on a tie the larger one."""
    return min(candidates, key=lambda g: (abs(g - target), -g))


class _Acceptance:
    """Acceptance rates that price an arm not yet played: an EWMA per draft position and, per
    request, whether the second draft was accepted at consecutive steps."""

    def __init__(self, max_gamma: int, weight: float, trust_after: int) -> None:
        self.weight = weight
        self.trust_after = trust_after
        self.rate = 1.0
        self.position_rate = [1.0] * max_gamma
        self.position_count = [0] * max_gamma
        self.total = 0
        self.transitions = [[0, 0], [0, 0]]
        self._last: dict[Hashable, tuple[int, int]] = {}
        self._hits = 0
        self._tries = 0
        self._pos_hits = [0] * max_gamma
        self._pos_tries = [0] * max_gamma

    def add(self, drafted: int, accepted: int, request: Hashable | None) -> None:
        """One request's verify outcome (counted at the next :meth:`commit`)."""
        if request is not None:
            last = self._last.pop(request, None)
            if last is not None and last[0] >= 2 and drafted >= 2:
                self.transitions[int(last[1] >= 2)][int(accepted >= 2)] += 1
            self._last[request] = (drafted, accepted)
            if len(self._last) > _MAX_TRACKED_REQUESTS:
                del self._last[next(iter(self._last))]
        if not drafted:
            return
        rejected = int(accepted < drafted)
        self._hits += accepted
        self._tries += accepted + rejected
        for k in range(accepted):
            self._pos_hits[k] += 1
            self._pos_tries[k] += 1
        if rejected:
            self._pos_tries[accepted] += 1

    def commit(self) -> None:
        """Fold the outcomes added since the last commit into the rates."""
        if not self._tries:
            return
        w = self.weight
        seen = self._hits / self._tries
        # the first batch of evidence replaces the optimistic start instead of blending with it
        self.rate = w * seen + (1 - w) * self.rate if self.total else seen
        for k, tries in enumerate(self._pos_tries):
            if not tries:
                continue
            seen = self._pos_hits[k] / tries
            if self.position_count[k]:
                self.position_rate[k] = w * seen + (1 - w) * self.position_rate[k]
            else:
                self.position_rate[k] = seen
            self.position_count[k] += tries
        self.total += self._tries
        self._hits = self._tries = 0
        self._pos_hits = [0] * len(self._pos_hits)
        self._pos_tries = [0] * len(self._pos_tries)

    def _continuation(self) -> float:
        """P(a draft survives) for positions with too few samples of their own: the rate of
        a second draft accepted after one accepted, else the deepest measured position's."""
        after_accept = self.transitions[1]
        n = sum(after_accept)
        if n:
            return after_accept[1] / n
        measured = [r for r, c in zip(self.position_rate, self.position_count, strict=True) if c]
        return measured[-1] if measured else self.rate

    def expected_tokens(self, gamma: int) -> float:
        """Committed tokens per request of a step at ``gamma`` (1 + expected accepted)."""
        fallback = self._continuation()
        survive = 1.0
        tokens = 1.0
        for k in range(gamma):
            # a position seen a handful of times can read 100 % by chance: until it has a
            # window of samples the request-level continuation rate stands in for it
            r = self.position_rate[k] if self.position_count[k] >= self.trust_after else fallback
            survive *= min(max(r, 0.0), 1.0)
            tokens += survive
        return tokens


@dataclass(slots=True)
class _Arm:
    """One gamma in one bucket: its last ``window`` steady steps and a transferred prior."""

    tokens: deque[float]
    ms: deque[float]
    n: int = 0
    prior: float = 0.0
    prior_weight: int = 0

    @property
    def weight(self) -> int:
        """Samples plus prior weight (what UCB1 and the 'measured' tests count)."""
        return self.n + self.prior_weight

    def mean(self) -> float:
        """Tokens per millisecond, blended with the prior by sample counts."""
        total_ms = sum(self.ms)
        measured = sum(self.tokens) / total_ms if total_ms else 0.0
        if not self.prior_weight:
            return measured
        if not self.n:
            return self.prior
        return (measured * self.n + self.prior * self.prior_weight) / self.weight


@dataclass(slots=True)
class _Bucket:
    """Per-bucket state of the walk (see the module docstring)."""

    arms: dict[int, _Arm]
    selected: int | None = None
    selected_at: int = 0  # the selected arm's sample count when it was selected
    since: int = 0  # decisions since the selection
    visited: set[int] = field(default_factory=set)
    returned: bool = False
    visit_target: int | None = None
    transfer_target: int | None = None
    seeded_from: int | None = None
    seed_done: bool = False
    closed_at: int | None = None  # anchor samples when the unvisited arms were closed
    recheck_at: int | None = None  # anchor samples when its re-measurement began


class Ucb1Controller:
    """The UCB1 online policy (module docstring). Implements ``Controller``."""

    def __init__(self, config: UcbConfig | None = None) -> None:
        cfg = config or UcbConfig()
        self.config = cfg
        self._arms = cfg.arms()
        self._limits = dict(cfg.batch_limits)
        middle = _nearest(self._arms, (cfg.min_gamma + cfg.max_gamma + 1) // 2)
        self.anchor = cfg.initial_gamma if cfg.initial_gamma is not None else middle
        # A wide range with gamma 0 in it is walked only after a long look at the anchor.
        self._defer = (cfg.window * 8
                       if cfg.min_gamma == 0 and cfg.max_gamma - cfg.min_gamma >= 4 else 0)
        self._burn_in = cfg.warmup_samples
        if cfg.initial_gamma is not None:
            self._current = cfg.initial_gamma
        else:
            self._current = self.anchor if self._defer else cfg.max_gamma
        self._acc = _Acceptance(cfg.max_gamma, cfg.ewma_weight, cfg.window)
        self._buckets: dict[int, _Bucket] = {}
        self._active: int | None = None
        self.selections: dict[int, int] = {}
        self.switches = 0
        self.observations = 0

    # -- Controller protocol -----------------------------------------------------------------
    def decide(self, batch_size: int, token_budget: int) -> int:
        """The gamma drafted after this step (``token_budget``: the host's max batched tokens;
        <= 0 means none)."""
        if batch_size <= 0:
            return self._current
        self._acc.commit()
        feasible = [g for g in self._arms if self._fits(g, batch_size, token_budget)]
        prev = self._current
        if not feasible:
            # nothing fits: the floor, as every vSpec policy answers an impossible budget
            return self._play(self._arms[0], prev)
        if prev not in feasible:
            self._bucket(batch_bucket(batch_size))  # created (and seeded) as a forced step does
            return self._play(max(feasible), prev)
        return self._play(self._choose(batch_size, feasible, prev), prev)

    def observe(self, feedback: StepFeedback) -> None:
        """Acceptance from every step; a reward from a steady step whose verified width is the
        scheduled one (after the first ``warmup_samples`` such steps)."""
        self.observations += 1
        top = self.config.max_gamma
        ids = feedback.request_ids
        useful = 0
        for i, (d, a) in enumerate(zip(feedback.drafted, feedback.accepted, strict=True)):
            d = min(max(d, 0), top)
            a = min(max(a, 0), d)
            self._acc.add(d, a, ids[i] if ids is not None else None)
            useful += a + 1
        self._acc.commit()
        scheduled = feedback.next_gamma if feedback.next_gamma is not None else self._current
        if feedback.next_gamma is not None and feedback.next_gamma in self._arms:
            self._current = feedback.next_gamma  # the host may hold a gamma (a pinned zero)
        if (not feedback.steady or feedback.interval_s <= 0 or scheduled != feedback.gamma
                or scheduled not in self._arms):
            return
        if self._burn_in:
            self._burn_in -= 1
            return
        tokens = float(useful if feedback.drafted else feedback.batch_size)
        arm = self._bucket(batch_bucket(feedback.batch_size)).arms[scheduled]
        arm.tokens.append(tokens)
        arm.ms.append(feedback.interval_s * 1000.0)
        arm.n += 1

    def settled(self) -> bool:
        """Always: 0.14.3 pinned the cohort at every zero it chose."""
        return True

    def report(self) -> ControllerSnapshot:
        """Measured goodput (tokens/s) of the arms of the bucket decided for last."""
        b = self._buckets.get(self._active) if self._active is not None else None
        arms = {g: a.mean() * 1000.0 for g, a in b.arms.items() if a.n} if b else {}
        return ControllerSnapshot("online-ucb1", self._current, arms)

    def snapshot(self) -> dict[str, Any]:
        """Selections, acceptance rates and per-bucket arms (mean reward in tokens/ms)."""
        return {
            "policy": "online-ucb1",
            "gamma": self._current,
            "anchor": self.anchor,
            "selection_counts": dict(sorted(self.selections.items())),
            "switches": self.switches,
            "acceptance_rate": self._acc.rate,
            "position_acceptance_rates": list(self._acc.position_rate),
            "second_token_transition_counts": [list(r) for r in self._acc.transitions],
            "buckets": {
                str(k): {
                    "visited": sorted(b.visited),
                    "arms": {str(g): {"observations": a.n, "prior_weight": a.prior_weight,
                                      "mean_reward": a.mean()}
                             for g, a in b.arms.items() if a.n},
                }
                for k, b in sorted(self._buckets.items())
            },
        }

    # -- helpers ---------------------------------------------------------------------------
    def _fits(self, gamma: int, batch: int, budget: int) -> bool:
        limit = self._limits.get(gamma)
        if limit is not None and batch > limit:
            return False
        return budget <= 0 or batch * (gamma + 1) <= budget

    def _play(self, gamma: int, prev: int) -> int:
        self.selections[gamma] = self.selections.get(gamma, 0) + 1
        self.switches += gamma != prev
        self._current = gamma
        return gamma

    def _toward(self, cur: int, target: int, feasible: list[int]) -> int:
        """One move of at most ``max_gamma_step`` toward ``target``, on a feasible arm."""
        s = self.config.max_gamma_step
        lo = max(feasible[0], cur - s)
        hi = min(feasible[-1], cur + s)
        return _nearest(feasible, min(max(target, lo), hi))

    @staticmethod
    def _select(b: _Bucket, gamma: int) -> int:
        b.selected, b.selected_at, b.since = gamma, b.arms[gamma].n, 1
        return gamma

    def _move(self, b: _Bucket, cur: int, target: int, feasible: list[int]) -> int:
        """Move toward ``target``; when no move is possible, count one more decision held."""
        g = self._toward(cur, target, feasible)
        if g != cur:
            return self._select(b, g)
        b.since += 1
        return g

    def _preferred(self, b: _Bucket, candidates: list[int]) -> int:
        """The best measured arm; among arms within half the hysteresis of it, the one nearest
        the anchor (larger on a tie)."""
        best = max(b.arms[g].mean() for g in candidates)
        band = abs(best) * self.config.hysteresis * 0.5
        near = [g for g in candidates if best - b.arms[g].mean() <= band]
        return _nearest(near, self.anchor)

    def _bucket(self, key: int) -> _Bucket:
        b = self._buckets.get(key)
        if b is None:
            arms = {g: _Arm(deque(maxlen=self.config.window), deque(maxlen=self.config.window))
                    for g in self._arms}
            b = self._buckets[key] = _Bucket(arms)
        # A seeded bucket re-reads its source until its own visits are done.
        refresh = (b.seeded_from is not None and not b.returned
                   and len(b.visited) < len(b.arms))
        if not b.seed_done or refresh:
            b.seed_done = self._seed(key, b)
        return b

    def _seed(self, key: int, b: _Bucket) -> bool:
        """Borrow the arms of the bucket twice as large (only fuller into draining: the other
        way, start-up buckets would seed each other in a circle)."""
        src = self._buckets.get(key * 2)
        if src is None:
            return False
        observed = [g for g in src.visited if src.arms[g].weight]
        if not observed:
            return False
        scale = key / (key * 2)
        for g, arm in b.arms.items():
            arm.prior = src.arms[_nearest(observed, g)].mean() * scale
            arm.prior_weight = self.config.warmup_samples
        b.seeded_from = key * 2
        b.transfer_target = self._preferred(src, observed)
        if src.returned and (all(g in src.visited for g in src.arms)
                             or src.closed_at is not None):
            b.visited.update(b.arms)
            b.returned = True
        return True

    def _modelled(self, b: _Bucket, known: int, gamma: int) -> float:
        """Reward of unplayed ``gamma`` from measured ``known``: tokens scale with expected
        acceptance, time with (gamma + shared cost) drafter passes."""
        reward = b.arms[known].mean()
        if reward <= 0:
            return 0.0
        ratio = self._acc.expected_tokens(gamma) / self._acc.expected_tokens(known)
        shared = self.config.probe_shared_cost_units
        return reward * ratio / ((gamma + shared) / (known + shared))

    # -- the rule ----------------------------------------------------------------------------
    def _choose(self, batch: int, feasible: list[int], prev: int) -> int:
        cfg = self.config
        warm = cfg.warmup_samples
        key = batch_bucket(batch)
        b = self._bucket(key)
        anchor = _nearest(feasible, self.anchor)
        entered = self._active is not None and self._active != key
        self._active = key
        if entered and cfg.initial_gamma is not None:
            if b.transfer_target in feasible:
                resume = b.transfer_target
            else:
                measured = [g for g in feasible
                            if g in b.visited and b.arms[g].weight >= warm]
                resume = self._preferred(b, measured) if measured else anchor
            if prev != resume:
                g = self._select(b, self._toward(prev, resume, feasible))
                b.transfer_target = None if g == resume else resume
                return g
        if (self._defer and not (b.visited - {anchor})
                and b.arms[anchor].n < self._defer):
            g = self._select(b, self._toward(prev, anchor, feasible))
            b.visited.add(g)
            return g
        for name in ("transfer_target", "visit_target"):
            target = getattr(b, name)
            if target is None:
                continue
            reachable = _nearest(feasible, target)
            if prev != reachable:
                g = self._select(b, self._toward(prev, reachable, feasible))
                if g == reachable:
                    setattr(b, name, None)
                return g
            setattr(b, name, None)
        if b.selected != prev:
            b.selected, b.selected_at, b.since = prev, b.arms[prev].n, 0
        hold = cfg.control_interval if prev in b.visited else warm + cfg.inflight_padding
        if b.since < hold:
            b.since += 1
            return prev
        b.visited.add(prev)
        if cfg.initial_gamma is not None:
            waited = self._anchor_waits(b, prev, anchor, feasible)
            if waited is not None:
                return waited
        unvisited = [g for g in feasible if g not in b.visited]
        if unvisited and cfg.initial_gamma is not None:
            measured = [g for g in feasible if g in b.visited and b.arms[g].weight >= warm]
            if measured:
                opened = self._frontier(b, prev, anchor, feasible, unvisited, measured)
                if isinstance(opened, int):
                    return opened
                unvisited = opened
        if unvisited:
            target = _nearest(unvisited, prev)
            g = self._toward(prev, target, feasible)
            if g != target:
                b.visit_target = target
            return self._select(b, g)
        if any(b.arms[g].weight < warm for g in feasible if g in b.visited):
            # visited arms still owe samples (late feedback): wait on the middle arm rather
            # than let the last probe keep being played
            middle = _nearest(feasible, round((feasible[0] + feasible[-1]) / 2))
            return self._move(b, prev, middle, feasible)
        if not b.returned:
            returned = self._return(b, prev, anchor, feasible)
            if returned is not None:
                return returned
        if b.arms[prev].n - b.selected_at <= 0:
            b.since += 1  # no new sample of the current arm since it was selected
            return prev
        return self._ucb(b, prev, feasible)

    def _anchor_waits(self, b: _Bucket, prev: int, anchor: int,
                      feasible: list[int]) -> int | None:
        """With an anchor: wait at it for its first samples, then at the best measured arm
        while a probe that is not already clearly worse owes samples."""
        warm = self.config.warmup_samples
        if b.arms[anchor].weight < warm:
            return self._move(b, prev, anchor, feasible)
        owed = [g for g in b.visited if b.arms[g].weight < warm]
        measured = [g for g in feasible if b.arms[g].weight >= warm]
        if measured:
            floor = max(b.arms[g].mean() for g in measured) * (1 - self.config.hysteresis)
            owed = [g for g in owed if not (b.arms[g].n > 0 and b.arms[g].mean() < floor)]
        if not owed:
            return None
        target = self._preferred(b, measured) if measured else anchor
        return self._move(b, prev, target, feasible)

    def _frontier(self, b: _Bucket, prev: int, anchor: int, feasible: list[int],
                  unvisited: list[int], measured: list[int]) -> int | list[int]:
        """Which unvisited arms may open (returned as a list), or the gamma decided instead."""
        cfg = self.config
        best = self._preferred(b, measured)
        if b.recheck_at is not None:
            if prev != anchor:
                return self._select(b, self._toward(prev, anchor, feasible))
            if b.arms[anchor].n - b.recheck_at < cfg.window:
                b.since += 1
                return prev
            b.recheck_at = None
        if b.arms[prev].weight >= cfg.warmup_samples and prev != best:
            g = self._select(b, self._toward(prev, best, feasible))
            b.since = cfg.control_interval  # part of the walk: compare again at once
            return g
        anchor_n = b.arms[anchor].n
        opened: list[int] = []
        if anchor_n >= cfg.window:
            best_reward = b.arms[best].mean()
            need = max(cfg.hysteresis, cfg.exploration)
            for target in unvisited:
                i = self._arms.index(target) + (-1 if target > anchor else 1)
                if not 0 <= i < len(self._arms) or self._arms[i] not in measured:
                    continue
                edge = self._arms[i]
                if b.arms[edge].mean() < best_reward * (1 - cfg.hysteresis):
                    continue
                if self._modelled(b, edge, target) > best_reward * (1 + need):
                    opened.append(target)
        if opened:
            b.closed_at = None
            return opened
        # Nothing promises a gain: re-measure the anchor for a window, then hold it.
        b.closed_at = anchor_n
        if prev != anchor:
            b.recheck_at = anchor_n
            return self._select(b, self._toward(prev, anchor, feasible))
        b.returned = True
        return self._select(b, prev)

    def _return(self, b: _Bucket, prev: int, anchor: int, feasible: list[int]) -> int | None:
        """The one return after the visits: to the best arm ('best', unless it does not beat
        the anchor by half the hysteresis) or to the anchor ('incumbent')."""
        cfg = self.config
        best = self._preferred(b, [g for g in feasible if b.arms[g].weight])
        target = anchor if cfg.warmup_return == "incumbent" else best
        if cfg.warmup_return == "best" and best != anchor:
            base = b.arms[anchor].mean()
            if b.arms[best].mean() - base < abs(base) * cfg.hysteresis * 0.5:
                target = anchor
        if prev != target:
            g = self._select(b, self._toward(prev, target, feasible))
            b.returned = g == target
            return g
        b.returned = True
        return None

    def _ucb(self, b: _Bucket, prev: int, feasible: list[int]) -> int:
        cfg = self.config
        scored = [g for g in feasible if b.arms[g].weight]
        total = sum(b.arms[g].weight for g in scored)
        scale = max(b.arms[g].mean() for g in scored)

        def score(g: int) -> float:
            arm = b.arms[g]
            bonus = 0.0
            if cfg.exploration and scale:
                bonus = cfg.exploration * scale * math.sqrt(
                    2.0 * math.log(total + 1) / arm.weight)
            return arm.mean() + bonus

        best = max(scored, key=lambda g: (score(g), g))
        top, here = score(best), score(prev)
        if best == prev or top - here < abs(here) * cfg.hysteresis:
            b.selected, b.selected_at, b.since = prev, b.arms[prev].n, 1
            return prev
        return self._select(b, self._toward(prev, best, feasible))


__all__ = ["Ucb1Controller", "UcbConfig", "batch_bucket"]
