"""Reference gamma policies, each a :class:`~vllm_hust_vspec.adaptive.feedback.Controller`.

These re-implement the *ideas* of published policies from their descriptions (no code copied):

* ``FixedGamma`` -- vLLM's static ``num_speculative_tokens``.
* ``VllmBatchSchedule`` -- vLLM's ``num_speculative_tokens_per_batch_size``: a list of
  inclusive ``[lo, hi, K]`` batch-size ranges looked up by the number of scheduled requests.
* ``SglangAdaptive`` -- EMA (alpha 0.2) of the per-request accept length, target
  ``round(EMA) + 1`` snapped up to the next of a few tiers.
* ``HfHeuristic`` -- Hugging Face assisted generation's "heuristic" schedule: +2 after a fully
  accepted draft, -1 otherwise, never below 1.
* ``Ucb1`` -- plain UCB1 over gamma arms, reward = committed tokens / step time.

Policies from current upstream (vLLM's acceptance-adaptive K and DFlash adaptive K, SGLang's
per-batch-size EMA, a Nightjar-style bandit) live in :mod:`.vllm_upstream` and
:mod:`.per_batch`.
"""

from __future__ import annotations

import math
from typing import Any

from ...adaptive.feedback import SettledPolicy, StepFeedback
from ...adaptive.fixed import FixedController


def _clip(g: int, lo: int, hi: int) -> int:
    return lo if g < lo else (hi if g > hi else g)


class FixedGamma(FixedController):
    """``fixed:K``: the adaptive package's fixed controller pinned at K."""

    def __init__(self, gamma: int) -> None:
        super().__init__(gamma, gamma)
        self.gamma = gamma


def default_vllm_schedule(max_gamma: int) -> list[tuple[int, int, int]]:
    """The batch-size schedule we use for the vLLM baseline.

    Full depth while the batch is small (the GPU is latency bound), half from 17, a quarter
    from 65 and 1 from 129 upward, i.e. for max 5: 1-16 -> 5, 17-64 -> 3, 65-128 -> 1,
    129+ -> 1. This mirrors the shape of the examples that ship with vLLM's dynamic schedule.
    """
    m = max_gamma
    return [
        (1, 16, m),
        (17, 64, max(1, (m + 1) // 2)),
        (65, 128, max(1, m // 4)),
        (129, 1 << 30, 1 if m >= 1 else 0),
    ]


class VllmBatchSchedule(SettledPolicy):
    """vLLM's ``num_speculative_tokens_per_batch_size`` lookup (static in batch size)."""

    def __init__(self, min_gamma: int, max_gamma: int,
                 schedule: list[tuple[int, int, int]] | None = None) -> None:
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.schedule = sorted(schedule or default_vllm_schedule(max_gamma))
        if not self.schedule or self.schedule[0][0] != 1:
            raise ValueError("the batch-size schedule must start at batch 1")

    def decide(self, batch_size: int, token_budget: int) -> int:
        """K of the range holding ``batch_size`` (gaps carry the previous K forward)."""
        k = self.schedule[0][2]
        for lo, _hi, kk in self.schedule:
            if batch_size < lo:
                break
            k = kk
        return _clip(k, self.min_gamma, self.max_gamma)

    def observe(self, feedback: StepFeedback) -> None:
        """Ignored: the schedule is static."""

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "vllm-batch-schedule", "schedule": [list(s) for s in self.schedule]}


class SglangAdaptive(SettledPolicy):
    """EMA of the accept length, snapped to tiers (SGLang-style adaptive speculation)."""

    def __init__(self, min_gamma: int, max_gamma: int, *, ema_alpha: float = 0.2,
                 tiers: tuple[int, ...] = (1, 3, 7)) -> None:
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.alpha = ema_alpha
        clipped = {_clip(t, min_gamma, max_gamma) for t in tiers}
        self.tiers = tuple(sorted(clipped))
        self.ema: float | None = None
        self.gamma = self.tiers[-1]

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The current tier."""
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Update the EMA with this step's mean accepted drafts per request, re-pick the tier."""
        if not feedback.accepted or feedback.gamma <= 0:
            return
        mean_acc = sum(feedback.accepted) / len(feedback.accepted)
        self.ema = mean_acc if self.ema is None else (
            (1.0 - self.alpha) * self.ema + self.alpha * mean_acc)
        target = round(self.ema) + 1
        pick = self.tiers[-1]
        for tier in self.tiers:
            if tier >= target:
                pick = tier
                break
        self.gamma = pick

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "sglang-adaptive", "ema": self.ema, "gamma": self.gamma,
                "tiers": list(self.tiers)}


class HfHeuristic(SettledPolicy):
    """+2 after a step where every draft was accepted, -1 otherwise (floor 1)."""

    def __init__(self, min_gamma: int, max_gamma: int, start: int | None = None) -> None:
        self.lo = max(1, min_gamma) if max_gamma >= 1 else 0
        self.hi = max_gamma
        self.gamma = _clip(start if start is not None else max_gamma, self.lo, self.hi)

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The current gamma."""
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Batch version of the rule: "fully accepted" means every request accepted all."""
        if feedback.gamma <= 0 or not feedback.drafted:
            return
        if sum(feedback.accepted) >= sum(feedback.drafted):
            self.gamma = _clip(self.gamma + 2, self.lo, self.hi)
        else:
            self.gamma = _clip(self.gamma - 1, self.lo, self.hi)

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "hf-heuristic", "gamma": self.gamma}


class Ucb1(SettledPolicy):
    """Plain UCB1 over gamma in [min, max]; rewards normalised by the best reward seen."""

    def __init__(self, min_gamma: int, max_gamma: int, c: float = 2.0) -> None:
        self.arms = list(range(min_gamma, max_gamma + 1))
        self.count = {g: 0 for g in self.arms}
        self.total = {g: 0.0 for g in self.arms}
        self.n = 0
        self.c = c
        self.max_reward = 0.0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Untried arms first, then the highest upper confidence bound."""
        for g in self.arms:
            if self.count[g] == 0:
                return g
        scale = self.max_reward or 1.0
        log_n = math.log(self.n)
        best, best_score = self.arms[0], -1.0
        for g in self.arms:
            n = self.count[g]
            score = self.total[g] / n / scale + math.sqrt(self.c * log_n / n)
            if score > best_score:
                best, best_score = g, score
        return best

    def observe(self, feedback: StepFeedback) -> None:
        """Credit the step's reward to the gamma that was verified in it."""
        g = feedback.gamma
        if g not in self.count:
            return
        r = feedback.reward
        self.count[g] += 1
        self.total[g] += r
        self.n += 1
        if r > self.max_reward:
            self.max_reward = r

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "ucb1", "pulls": dict(self.count)}
