"""The predecessor's online controller (vllm-hust-vSpec 0.14.3, "Online-UCB"), as a baseline.

Re-implemented from its documentation and run logs (docs/vspec_online_adaptive_npu_report_
20260902.md, docs/dynamic_gamma_gsm8k_b128_optimization_report.md and the summary lines of
its Ascend runs), not from its code:

* arms are the gammas ``min_gamma..max_gamma``, kept per power-of-two batch bucket; an arm's
  reward is committed tokens (accepted + 1 per request) per second of completion interval over
  its last ``window`` steady steps (no prefill in the step and the verified width equal to the
  scheduled one); the first ``warmup_samples`` steady steps of the run are discarded;
* the draft-model host starts at its graph-backed gamma 2 (``initial_gamma``), other methods
  at the maximum; a new bucket first tries every arm once, the nearest untried arm first (ties
  to the larger), holding each for ``warmup_samples`` + 1 steps (the async in-flight frame),
  then returns to the best measured arm (``warmup_return="best"``) or to the anchor
  (``"incumbent"``);
* afterwards, every ``control_interval`` steps, UCB1: mean + ``exploration`` x the bucket's
  best mean x sqrt(2 ln(N + 1) / n); it moves (one gamma per decision) only when the best
  score beats the current arm's by ``hysteresis`` x the current score;
* a bucket first met while the batch drains inherits the arms of the next fuller bucket as a
  prior (scaled by the batch ratio, weight ``warmup_samples``), starts at that bucket's best
  measured arm, and skips its own sweep when the fuller bucket finished one.

* while an arm it tried has no steady sample, it waits on the middle arm of the range
  (``round((min + max) / 2)``); a probe whose only steady step was discarded (the run's first
  steady step is, and the step after a switch is not steady) keeps it there for good: its log
  shows exactly that at bucket 128 (gamma 2 held for 179 steps after one sample per arm).

What is left out: the one-step lag of async feedback (the simulator's feedback is never late),
the acceptance-model probe of unmeasured arms and the gamma-0 latch (the runs here use gamma
1..4).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..adaptive.feedback import SettledPolicy, StepFeedback


@dataclass(frozen=True, slots=True)
class PredUcbKnobs:
    """The predecessor's online knobs (its defaults for the B128 GSM8K draft run)."""

    control_interval: int = 2
    hysteresis: float = 0.05
    exploration: float = 0.01
    window: int = 32
    warmup_samples: int = 1
    warmup_return: str = "best"
    initial_gamma: int | None = 2
    max_gamma_step: int = 1
    inflight_padding: int = 1


@dataclass(slots=True)
class _Arm:
    window: deque[tuple[float, float]]
    count: int = 0
    prior: float = 0.0
    prior_weight: int = 0

    def measured(self) -> float:
        seconds = sum(s for _, s in self.window)
        return sum(t for t, _ in self.window) / seconds if seconds > 0 else 0.0

    def mean(self) -> float:
        if not self.prior_weight:
            return self.measured()
        if not self.count:
            return self.prior
        return ((self.measured() * self.count + self.prior * self.prior_weight)
                / (self.count + self.prior_weight))

    @property
    def effective(self) -> int:
        return self.count + self.prior_weight


@dataclass(slots=True)
class _Bucket:
    arms: dict[int, _Arm]
    selected: int | None = None
    selected_at: int = 0
    since: int = 0
    launched: set[int] = field(default_factory=set)
    returned: bool = False
    warm_target: int | None = None
    boot_target: int | None = None
    seeded: bool = False


def batch_bucket(batch: int) -> int:
    """The next power of two >= ``batch`` (the predecessor's bucket key)."""
    return 1 << (max(batch, 1) - 1).bit_length()


class PredecessorUcb(SettledPolicy):
    """``pred-ucb``: the predecessor's per-bucket UCB1 gamma controller (module docstring)."""

    def __init__(self, min_gamma: int, max_gamma: int,
                 knobs: PredUcbKnobs | None = None) -> None:
        self.knobs = knobs or PredUcbKnobs()
        lo = max(1, min_gamma)
        self.gammas = tuple(range(lo, max(lo, max_gamma) + 1))
        init = self.knobs.initial_gamma
        self.initial = init if init is not None and init in self.gammas else None
        mid = (self.gammas[0] + self.gammas[-1] + 1) // 2
        self.anchor = self.initial if self.initial is not None else self._nearest(mid)
        self.current = self.initial if self.initial is not None else self.gammas[-1]
        self.buckets: dict[int, _Bucket] = {}
        self.active: int | None = None
        self.burn_in = self.knobs.warmup_samples
        self.selections: dict[int, int] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _nearest(self, target: int) -> int:
        return min(self.gammas, key=lambda g: (abs(g - target), -g))

    def _step(self, current: int, target: int) -> int:
        s = self.knobs.max_gamma_step
        return self._nearest(min(max(target, current - s), current + s))

    def _bucket(self, key: int) -> _Bucket:
        b = self.buckets.get(key)
        if b is None:
            b = _Bucket(arms={g: _Arm(deque(maxlen=self.knobs.window)) for g in self.gammas})
            self.buckets[key] = b
        if not b.seeded or (not b.returned and len(b.launched) < len(self.gammas)):
            b.seeded = b.seeded or self._seed(key, b)
        return b

    def _seed(self, key: int, b: _Bucket) -> bool:
        src = self.buckets.get(key * 2)
        if src is None:
            return False
        observed = [g for g in sorted(src.launched) if src.arms[g].effective]
        if not observed:
            return False
        for g, arm in b.arms.items():
            near = min(observed, key=lambda o: (abs(o - g), -o))
            arm.prior = src.arms[near].mean() * key / (key * 2)
            arm.prior_weight = self.knobs.warmup_samples
        b.boot_target = self._preferred(src, observed)
        if src.returned and len(src.launched) == len(self.gammas):
            b.launched.update(self.gammas)
            b.returned = True
        return True

    def _preferred(self, b: _Bucket, candidates: list[int]) -> int:
        best = max(b.arms[g].mean() for g in candidates)
        band = abs(best) * self.knobs.hysteresis * 0.5
        near = [g for g in candidates if best - b.arms[g].mean() <= band]
        return min(near, key=lambda g: (abs(g - self.anchor), -g))

    def _activate(self, b: _Bucket, g: int) -> int:
        b.selected, b.selected_at, b.since = g, b.arms[g].count, 1
        self.current = g
        return g

    def _chosen(self, g: int) -> int:
        self.selections[g] = self.selections.get(g, 0) + 1
        return g

    # -- Controller protocol ---------------------------------------------------------------
    def decide(self, batch_size: int, token_budget: int) -> int:
        """The gamma drafted after this step."""
        return self._chosen(self._decide(batch_size))

    def _decide(self, batch_size: int) -> int:
        key = batch_bucket(batch_size)
        b = self._bucket(key)
        prev = self.current
        changed = self.active is not None and self.active != key
        self.active = key
        if changed and self.initial is not None:
            measured = [g for g in self.gammas if g in b.launched
                        and b.arms[g].effective >= self.knobs.warmup_samples]
            target = (b.boot_target if b.boot_target is not None
                      else self._preferred(b, measured) if measured else self.anchor)
            if prev != target:
                sel = self._activate(b, self._step(prev, target))
                b.boot_target = None if sel == target else target
                return sel
        for attr in ("boot_target", "warm_target"):
            target = getattr(b, attr)
            if target is not None:
                if prev != target:
                    sel = self._activate(b, self._step(prev, target))
                    if sel == target:
                        setattr(b, attr, None)
                    return sel
                setattr(b, attr, None)
        if b.selected != prev:
            b.selected, b.selected_at, b.since = prev, b.arms[prev].count, 0
        required = (self.knobs.control_interval if prev in b.launched
                    else self.knobs.warmup_samples + self.knobs.inflight_padding)
        if b.since < required:
            b.since += 1
            return prev
        b.launched.add(prev)
        unlaunched = [g for g in self.gammas if g not in b.launched]
        if unlaunched:
            target = min(unlaunched, key=lambda g: (abs(g - prev), -g))
            sel = self._step(prev, target)
            if sel != target:
                b.warm_target = target
            return self._activate(b, sel)
        awaiting = [g for g in self.gammas
                    if g in b.launched and b.arms[g].effective < self.knobs.warmup_samples]
        if awaiting:
            # a tried arm has no steady sample yet: wait on the middle arm (the predecessor's
            # guard against async feedback flooding the queue with the last probe); an arm
            # whose samples were all lost keeps it waiting there for good
            mid = self._nearest(round((self.gammas[0] + self.gammas[-1]) / 2))
            sel = self._step(prev, mid)
            if sel != prev:
                return self._activate(b, sel)
            b.since += 1
            return prev
        if not b.returned:
            measured = [g for g in self.gammas if b.arms[g].effective]
            incumbent = self.anchor
            if self.knobs.warmup_return == "best" and measured:
                best = self._preferred(b, measured)
                gain = b.arms[best].mean() - b.arms[self.anchor].mean()
                if gain >= abs(b.arms[self.anchor].mean()) * self.knobs.hysteresis * 0.5:
                    incumbent = best
            if prev != incumbent:
                sel = self._activate(b, self._step(prev, incumbent))
                b.returned = sel == incumbent
                return sel
            b.returned = True
        if b.arms[prev].count - b.selected_at <= 0:
            b.since += 1
            return prev
        return self._ucb(b, prev)

    def _ucb(self, b: _Bucket, prev: int) -> int:
        scored = [g for g in self.gammas if b.arms[g].effective]
        if prev not in scored:
            return prev
        total = sum(b.arms[g].effective for g in scored)
        scale = max(b.arms[g].mean() for g in scored)

        def score(g: int) -> float:
            arm = b.arms[g]
            bonus = (self.knobs.exploration * scale
                     * math.sqrt(2.0 * math.log(total + 1) / arm.effective)) if scale else 0.0
            return arm.mean() + bonus

        best = max(scored, key=lambda g: (score(g), g))
        if best == prev or score(best) - score(prev) < abs(score(prev)) * self.knobs.hysteresis:
            b.selected, b.selected_at, b.since = prev, b.arms[prev].count, 1
            return prev
        return self._activate(b, self._step(prev, best))

    def observe(self, feedback: StepFeedback) -> None:
        """Credit a steady step to its (bucket, gamma) arm; other steps teach nothing."""
        scheduled = feedback.next_gamma if feedback.next_gamma is not None else feedback.gamma
        if (not feedback.steady or feedback.interval_s <= 0 or scheduled != feedback.gamma
                or feedback.gamma not in self.gammas):
            return
        if self.burn_in:
            self.burn_in -= 1
            return
        tokens = float(sum(a + 1 for a in feedback.accepted))
        arm = self._bucket(batch_bucket(feedback.batch_size)).arms[feedback.gamma]
        arm.window.append((tokens, feedback.interval_s))
        arm.count += 1

    def snapshot(self) -> dict[str, Any]:
        """Selections and per-bucket arm means (ms units as the predecessor logged them)."""
        return {
            "policy": "pred-ucb",
            "gamma": self.current,
            "selection_counts": dict(sorted(self.selections.items())),
            "buckets": {
                str(k): {str(g): {"observations": a.count, "mean_reward": a.mean() / 1000.0}
                         for g, a in b.arms.items() if a.count}
                for k, b in sorted(self.buckets.items())
            },
        }
