"""Per-batch-size gamma policies from SGLang and the Nightjar paper, each a
:class:`~vllm_hust_vspec.adaptive.feedback.Controller` (sources and simplifications in each
class docstring, as in :mod:`.vllm_upstream`).

* ``SglangPerBatchEma`` -- SGLang's adaptive ``speculative_num_steps``: one EMA slot per
  batch-size key with its own candidate steps, warm-up, update interval and hysteresis.
* ``NightjarBandit`` -- Nightjar-style per-batch-size multi-armed bandit whose arms include
  gamma 0 (speculation disabled).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...adaptive.feedback import ControllerSnapshot, SettledPolicy, StepFeedback
from .reference import _clip
from .vllm_upstream import pow2_bucket

# --------------------------------------------------------------------------------------------
# SGLang: adaptive speculative_num_steps, one EMA slot per batch-size key
# --------------------------------------------------------------------------------------------

# SGLang's DEFAULT_ADAPTIVE_CONFIG: batch-size key -> (candidate steps, up, down hysteresis).
SGLANG_DEFAULT_SLOTS: dict[int, tuple[tuple[int, ...], float, float]] = {
    1: ((1, 3, 5, 7), 0.0, -0.25),
    8: ((0, 1, 3), 0.0, 0.0),
    32: ((0, 1), 0.0, 0.0),
    64: ((0,), 0.0, 0.0),
}


class _EmaSlot:
    """One batch-size slot: an EMA of accepted drafts per request over its candidate steps."""

    def __init__(self, candidates: Sequence[int], initial: int, *, alpha: float,
                 update_interval: int, warmup: int, up: float, down: float,
                 ceiling_coeff: float) -> None:
        self.candidates = sorted(set(candidates))
        self.alpha = alpha
        self.update_interval = update_interval
        self.warmup = warmup
        self.up = up
        self.down = down
        self.ceiling_coeff = ceiling_coeff
        self.steps = initial if initial in self.candidates else \
            self.candidates[len(self.candidates) // 2]
        self.ema = float(self.steps - 1)  # neutral start: one below the current steps
        self.batches = 0

    def update(self, accepted: Sequence[int], drafted: bool) -> None:
        """Blend the batch mean into the EMA (only while drafting), maybe re-pick steps."""
        if not accepted:
            return
        if self.steps > 0 and drafted:
            mean = sum(accepted) / len(accepted)
            self.ema = (1.0 - self.alpha) * self.ema + self.alpha * mean
        self.batches += 1
        if self.batches <= self.warmup or (self.batches - self.warmup) % self.update_interval:
            return
        self._recompute()

    def _recompute(self) -> None:
        cands = self.candidates
        old = self.steps
        idx = old_idx = cands.index(old)
        if old == 0:  # probe the next candidate after a no-speculation interval
            idx = min(idx + 1, len(cands) - 1)
            if cands[idx] > 0 and self.ema < 0:
                self.ema = float(cands[idx] - 1)
            self.steps = cands[idx]
            return
        while idx > 0:
            lower = cands[idx - 1]
            threshold = (0.5 if lower == 0 else lower - 0.5) + self.down
            if self.ema > threshold:
                break
            idx -= 1
        if idx == old_idx:
            while idx < len(cands) - 1 and self.ema > cands[idx] - 0.5 + self.up:
                idx += 1
        if self.ceiling_coeff > 0 and cands[idx] <= old:
            ceiling = max(1, math.ceil(self.ema * self.ceiling_coeff))
            while idx > 0 and cands[idx] > ceiling:
                idx -= 1
        self.steps = cands[idx]


class SglangPerBatchEma(SettledPolicy):
    """SGLang's adaptive ``speculative_num_steps`` (EMA strategy), one slot per batch size.

    Source: sgl-project/sglang ``python/sglang/srt/speculative/adaptive_spec_params.py``
    (``AdaptiveStepSlot`` / ``AdaptiveSpeculativeParams``, read at commit
    015c872628e328b530880bcf95ae91222604b225) and
    ``python/sglang/srt/speculative/adaptive_step_router.py`` (commit
    a12239f6ac74d804d169ee5d3cfed3c49fa7162c). Adaptive steps first landed in
    sgl-project/sglang PR #21599 and were extended since.

    Why a new class: our older ``SglangAdaptive`` is one global EMA that snaps
    ``round(EMA) + 1`` up to fixed tiers after every step. Upstream keeps one slot per
    batch-size key, each with its own candidate steps, a warm-up, an update interval and
    asymmetric hysteresis, and candidates that include 0 at larger batches; that is this
    class.

    Defaults and where they come from (all ``DEFAULT_ADAPTIVE_CONFIG`` / ``AdaptiveStepSlot``
    defaults): slots keyed by the lower bound of the batch size -- 1: steps {1, 3, 5, 7} with
    down-hysteresis -0.25; 8: {0, 1, 3}; 32: {0, 1}; 64: {0} -- EMA weight 0.2, warm-up 10
    batches, re-pick every 5 batches, up-hysteresis 0, ceiling coefficient 0 (off). Candidate
    steps are clipped to [min_gamma, max_gamma] (7 -> 5 for max 5); a slot starts at
    ``max_gamma`` (upstream: the configured ``speculative_num_steps``) when that is one of its
    candidates, else at its middle candidate, with the EMA at start - 1.

    Modelled faithfully: routing a batch to the slot with the largest key <= batch size;
    feeding each verified step's per-request accepted-draft counts to that slot; the EMA only
    moves while the slot drafts; after warm-up, every ``update_interval`` batches step down
    while the EMA is at or below ``lower - 0.5 + down`` (0.5 for a lower candidate of 0), else
    step up while above ``current - 0.5 + up``; a slot at 0 probes the next candidate at its
    next re-pick (seeding a negative EMA with that candidate - 1).

    Simplified: no CUDA-graph padding of the batch size before routing (upstream pads to the
    next captured graph size); the simulator's verified step can carry drafts decided for a
    neighbouring slot, so the EMA skips steps that verified no drafts. The alternative
    ``throughput_aware`` strategy is not modelled.
    """

    def __init__(self, min_gamma: int, max_gamma: int, *,
                 slots: Mapping[int, tuple[Sequence[int], float, float]] | None = None,
                 ema_alpha: float = 0.2, update_interval: int = 5, warmup_batches: int = 10,
                 ceiling_coeff: float = 0.0) -> None:
        cfg = SGLANG_DEFAULT_SLOTS if slots is None else slots
        if not cfg or min(cfg) < 1:
            raise ValueError("slots need at least one batch-size key >= 1")
        if update_interval < 1:
            raise ValueError("update_interval must be >= 1")
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.keys = sorted(cfg)
        self.slots: dict[int, _EmaSlot] = {}
        for key in self.keys:
            steps, up, down = cfg[key]
            clipped = {_clip(s, min_gamma, max_gamma) for s in steps}
            self.slots[key] = _EmaSlot(sorted(clipped), max_gamma, alpha=ema_alpha,
                                       update_interval=update_interval, warmup=warmup_batches,
                                       up=up, down=down, ceiling_coeff=ceiling_coeff)
        self.gamma = self.slot_for(1).steps

    def slot_for(self, batch_size: int) -> _EmaSlot:
        """The slot whose key is the largest one <= ``batch_size`` (the first one below)."""
        i = bisect.bisect_right(self.keys, batch_size) - 1
        return self.slots[self.keys[max(0, i)]]

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The current steps of this batch size's slot."""
        self.gamma = _clip(self.slot_for(batch_size).steps, self.min_gamma, self.max_gamma)
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Feed the step's accepted drafts per request to the slot of its batch size."""
        self.slot_for(feedback.batch_size).update(feedback.accepted, feedback.gamma > 0)

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "sglang-per-batch-ema", "gamma": self.gamma,
                "slots": {str(k): {"steps": s.steps, "ema": round(s.ema, 4),
                                   "candidates": list(s.candidates), "batches": s.batches}
                          for k, s in self.slots.items()}}


# --------------------------------------------------------------------------------------------
# Nightjar: per-batch-size bandit with a disable switch
# --------------------------------------------------------------------------------------------


class _Arms:
    """UCB1 statistics of one batch-size bucket."""

    __slots__ = ("count", "total", "n", "best")

    def __init__(self, arms: Sequence[int]) -> None:
        self.count = dict.fromkeys(arms, 0)
        self.total = dict.fromkeys(arms, 0.0)
        self.n = 0
        self.best = 0.0


class NightjarBandit:
    """A Nightjar-style planner: one multi-armed bandit per batch-size bucket, arms gamma in
    [min_gamma, max_gamma] including 0, the "disable speculation" switch.

    Source: R. Li, Z. Zhang, L. Zhang, H. Wang, X. Fu, Z. Lai, "Nightjar: Dynamic Adaptive
    Speculative Decoding for Large Language Models Serving", arXiv 2512.22420 (v1-v3, read as
    the arXiv HTML pages). Only the abstracts and introductions were available to read, and no
    public code was found; they state the idea used here: an MAB planner picks the
    speculative length per batch size, can disable speculation when it does not pay, and
    (v2/v3) offloads the draft model to the CPU under KV-cache pressure while disabled, with a
    cost for restarting speculation.

    Modelled: independent UCB1 statistics per power-of-two batch bucket; every arm of a
    bucket is tried once (largest gamma first), then the arm with the highest
    ``mean / best + sqrt(c * ln n / count)``, where rewards are the step's committed tokens
    per second normalised by the best reward seen in that bucket (rewards differ by orders of
    magnitude across batch sizes); a step's reward is credited to the gamma verified in it
    and to the bucket of its batch size. ``settled()`` is False until the bucket being
    decided for has tried every arm, so a sticky host only pins gamma 0 once the bandit has
    measured it against the others.

    Not from the paper (its algorithm details were not available): UCB1 with ``c`` = 2 (the
    same as our ``ucb1`` baseline) and power-of-two buckets are our choices. Not modelled:
    the draft-model offload and KV-cache capacity it frees (the simulator has no KV memory),
    the queueing / KV-shortage trigger, and the restart cost after a disabled phase (the
    simulator's drafter needs no catch-up).
    """

    def __init__(self, min_gamma: int, max_gamma: int, *, c: float = 2.0) -> None:
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.arms = list(range(max_gamma, min_gamma - 1, -1))  # largest first
        self.c = c
        self.buckets: dict[int, _Arms] = {}
        self.gamma = max_gamma
        self._last_bucket = 1

    def _state(self, bucket: int) -> _Arms:
        st = self.buckets.get(bucket)
        if st is None:
            st = self.buckets[bucket] = _Arms(self.arms)
        return st

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Untried arms of this bucket first, then UCB1 within the bucket."""
        bucket = pow2_bucket(batch_size)
        self._last_bucket = bucket
        st = self._state(bucket)
        for g in self.arms:
            if st.count[g] == 0:
                self.gamma = g
                return g
        scale = st.best or 1.0
        log_n = math.log(st.n)
        best, best_score = self.arms[0], -math.inf
        for g in self.arms:
            n = st.count[g]
            score = st.total[g] / n / scale + math.sqrt(self.c * log_n / n)
            if score > best_score:
                best, best_score = g, score
        self.gamma = best
        return best

    def observe(self, feedback: StepFeedback) -> None:
        """Credit committed tokens / s to the verified gamma in this batch size's bucket."""
        g = feedback.gamma
        if g < self.min_gamma or g > self.max_gamma or feedback.interval_s <= 0:
            return
        st = self._state(pow2_bucket(feedback.batch_size))
        r = feedback.reward
        st.count[g] += 1
        st.total[g] += r
        st.n += 1
        if r > st.best:
            st.best = r

    def settled(self) -> bool:
        """True once the latest bucket has tried every arm."""
        st = self.buckets.get(self._last_bucket)
        return st is not None and all(st.count.values())

    def report(self) -> ControllerSnapshot:
        """Latest gamma and the mean reward per tried arm of the latest bucket."""
        st = self.buckets.get(self._last_bucket)
        est = {} if st is None else {g: st.total[g] / st.count[g]
                                     for g in self.arms if st.count[g]}
        return ControllerSnapshot("nightjar-bandit", self.gamma, est)

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "nightjar-bandit", "gamma": self.gamma,
                "pulls": {str(b): {str(g): st.count[g] for g in self.arms}
                          for b, st in sorted(self.buckets.items())}}


__all__ = [
    "SGLANG_DEFAULT_SLOTS",
    "NightjarBandit",
    "SglangPerBatchEma",
]
