"""Gamma policies from current upstream vLLM, each a
:class:`~vllm_hust_vspec.adaptive.feedback.Controller`.

As in :mod:`.reference`, these are the published *ideas* written again here, with no code
copied. Each class docstring names the source it was read from (repository, path and the
commit read), says where every default constant comes from, and lists what is modelled
faithfully and what is simplified for the simulator, which only gives a controller the
per-step :class:`StepFeedback` (batch size, verified gamma, per-request drafted / accepted
counts, committed tokens, step interval).

* ``AcceptanceAdaptiveK`` -- vLLM's acceptance-adaptive K for Dynamic SD: per-position
  acceptance, drop the trailing positions below a threshold, probe full K periodically,
  ``min`` with the batch-size schedule.
* ``DflashAdaptiveK`` -- vLLM Model Runner V2's DFlash adaptive K: K from {0, 1, 3, 7, ..,
  max}, a cost profile, a survival EMA and a per-bucket runtime-overhead EMA.

The per-batch-size policies (SGLang's, Nightjar's) are in :mod:`.per_batch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ...adaptive.feedback import ControllerSnapshot, SettledPolicy, StepFeedback
from ..cost import CostModel
from .reference import VllmBatchSchedule, _clip


def pow2_bucket(batch_size: int) -> int:
    """Smallest power of two >= ``batch_size`` (0 for an empty batch): 1, 2, 4, 8, 16, .."""
    return 0 if batch_size < 1 else 1 << (batch_size - 1).bit_length()


# --------------------------------------------------------------------------------------------
# vLLM: acceptance-adaptive K (Dynamic SD)
# --------------------------------------------------------------------------------------------


class AcceptanceAdaptiveK(SettledPolicy):
    """vLLM's ``AcceptanceAdaptiveK`` (Dynamic SD), followed by the batch-size schedule.

    Source: vllm-project/vllm ``vllm/v1/spec_decode/dynamic/adaptive.py`` (read at commit
    9f1044b53b111cff709b13ae907dc8e741936f3f; it is not in the 0.33.0 wheel, whose
    ``dynamic/`` package only has the batch-size schedule in ``utils.py``), its tests
    ``tests/v1/spec_decode/test_adaptive_sd.py`` and the "Acceptance-adaptive K" section of
    ``docs/features/speculative_decoding/dynamic_speculative_decoding.md`` (same commit).

    Defaults and where they come from: ``threshold`` 0.4 (``adaptive_acceptance_threshold``,
    docs; the class itself has no default), ``window`` 256 drafts, ``probe_interval`` 64
    steps and ``hysteresis`` 0.05 (class defaults, repeated in the docs as
    ``adaptive_window_drafts`` / ``adaptive_probe_interval`` / ``adaptive_hysteresis``). The
    lower bound is the scenario's ``min_gamma`` (upstream default
    ``adaptive_min_num_speculative_tokens`` 0) and the upper bound its ``max_gamma``
    (``num_speculative_tokens``).

    Modelled faithfully: one observation per request per step ("a draft"); position ``p`` of a
    draft counts as accepted when the request accepted more than ``p`` tokens, and only the
    drafted positions are updated; the per-position estimate is a plain mean for its first
    ``window`` samples, then an EMA with weight ``1 / window``; until ``window`` drafts have
    been seen K stays at max; every ``probe_interval``-th step K is forced to max; otherwise K
    is the number of leading enabled positions, where a position is disabled once its rate
    falls below ``threshold`` and re-enabled only at ``threshold + hysteresis``, and a
    never-drafted position stays enabled; K is clamped to [min, max]. The scheduler then
    uses ``min(schedule_k, adaptive_k)``, as upstream does when both are configured.

    Simplified: the batch-size schedule is the one our ``vllm-batch-schedule`` baseline uses
    (:func:`~.reference.default_vllm_schedule`), since upstream ships only examples; pass
    ``schedule`` to change it or ``use_schedule=False`` for the controller alone. The step
    counter advances once per ``decide`` (upstream: once per ``schedule()`` call, which the
    simulator's engine step mirrors). CUDA-graph sizing (``possible_num_speculative_tokens``)
    and the data-parallel switch-off have no counterpart here.
    """

    def __init__(self, min_gamma: int, max_gamma: int, *, threshold: float = 0.4,
                 window: int = 256, probe_interval: int = 64, hysteresis: float = 0.05,
                 schedule: list[tuple[int, int, int]] | None = None,
                 use_schedule: bool = True) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if window < 1:
            raise ValueError("window must be >= 1")
        if probe_interval < 0:
            raise ValueError("probe_interval must be >= 0")
        if hysteresis < 0.0:
            raise ValueError("hysteresis must be >= 0")
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.threshold = threshold
        self.window = window
        self.probe_interval = probe_interval
        self.hysteresis = hysteresis
        self.rate = [0.0] * max_gamma  # per-position acceptance estimate
        self.samples = [0] * max_gamma  # drafts observed at each position
        self.enabled = [True] * max_gamma
        self.num_drafts = 0
        self.num_steps = 0
        self.current_k = max_gamma
        self.schedule = VllmBatchSchedule(min_gamma, max_gamma, schedule) if use_schedule \
            else None
        self.gamma = max_gamma
        self.probed = False

    def _record(self, drafted: int, accepted: int) -> None:
        """One verified draft (one request, one step)."""
        if drafted <= 0 or self.max_gamma <= 0:
            return
        d = min(drafted, self.max_gamma)
        a = min(accepted, d)
        self.num_drafts += 1
        w = self.window
        for pos in range(d):
            hit = 1.0 if pos < a else 0.0
            n = self.samples[pos]
            if n < w:
                self.rate[pos] = (self.rate[pos] * n + hit) / (n + 1)
            else:
                self.rate[pos] += (hit - self.rate[pos]) / w
            self.samples[pos] = n + 1

    def recommended_k(self) -> int:
        """Leading enabled positions, after applying the threshold and hysteresis."""
        k = 0
        for pos in range(self.max_gamma):
            if self.samples[pos] > 0:
                r = self.rate[pos]
                if self.enabled[pos] and r < self.threshold:
                    self.enabled[pos] = False
                elif not self.enabled[pos] and r >= self.threshold + self.hysteresis:
                    self.enabled[pos] = True
            if not self.enabled[pos]:
                break
            k += 1
        return max(self.min_gamma, min(self.max_gamma, k))

    def adaptive_k(self) -> int:
        """The controller's K for the step about to be issued (warm-up, probe, estimate)."""
        self.num_steps += 1
        self.probed = False
        if self.num_drafts < self.window:
            return self.max_gamma
        if self.probe_interval and self.num_steps % self.probe_interval == 0:
            self.probed = True
            return self.max_gamma
        self.current_k = self.recommended_k()
        return self.current_k

    def decide(self, batch_size: int, token_budget: int) -> int:
        """``min(schedule K, adaptive K)``, clamped to [min_gamma, max_gamma]."""
        k = self.adaptive_k()
        if self.schedule is not None:
            k = min(k, self.schedule.decide(batch_size, token_budget))
        self.gamma = _clip(k, self.min_gamma, self.max_gamma)
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Feed every request's drafted / accepted counts of the step."""
        for d, a in zip(feedback.drafted, feedback.accepted, strict=False):
            self._record(d, a)

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "vllm-acceptance-adaptive-k", "gamma": self.gamma,
                "adaptive_k": self.current_k, "acceptance": [round(r, 4) for r in self.rate],
                "enabled": list(self.enabled), "drafts": self.num_drafts,
                "steps": self.num_steps, "threshold": self.threshold}


# --------------------------------------------------------------------------------------------
# vLLM Model Runner V2: DFlash adaptive K
# --------------------------------------------------------------------------------------------


def dflash_k_candidates(max_k: int) -> list[int]:
    """0, then 1, 3, 7, 15, .. (query lengths K + 1 that are powers of two) below ``max_k``,
    then ``max_k`` itself."""
    out = [0]
    k = 1
    while k < max_k:
        out.append(k)
        k = 2 * k + 1
    if max_k > 0 and out[-1] != max_k:
        out.append(max_k)
    return out


# Per-request context of upstream's start-up profile
# (VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN, default 8192; a deployment may set it).
DFLASH_PROFILE_CONTEXT = 8192


def dflash_startup_cost(cost: CostModel) -> Callable[[int, int], float]:
    """The start-up profile DFlash adaptive K takes before serving: a decode-only step of
    ``batch`` requests at K, priced by ``cost`` at the profile's context."""
    def price(batch: int, k: int) -> float:
        return cost.steady_time(batch, k, batch * DFLASH_PROFILE_CONTEXT)
    return price


class DflashAdaptiveK:
    """Model Runner V2's DFlash adaptive K (``DFlashAdaptiveKPolicy`` + the manager's
    per-bucket selection).

    Source: vllm-project/vllm ``vllm/v1/worker/gpu/spec_decode/dflash/adaptive_k.py`` (read at
    commit b1171c804b96474eafd3e2f0354b8ec67bfa8ab7, re-read 2026-12-03) and its unit tests.
    Neither the 0.33.0 wheel nor the 0.32.0 build in our venv has it: their
    ``v1/worker/gpu/spec_decode/dflash/`` (``speculator.py``, ``cudagraph.py``,
    ``utils.py``) contains no adaptive-K logic.

    Defaults and where they come from: ``history_weight`` 0.2 and ``decision_interval`` 2
    (``DFlashAdaptiveKManager`` defaults); 2 runtime samples before the overhead EMA is used
    (``_RUNTIME_CALIBRATION_SAMPLES``); full K below batch 16 (hard-coded in ``select_k``);
    candidates from :func:`dflash_k_candidates` (``get_dflash_k_candidates``), i.e. {0, 1, 3,
    7} for max 7 and {0, 1, 3, 5} for max 5, restricted to [min_gamma, max_gamma]; overhead
    buckets are powers of two (``_batch_bucket``); the profile's context is
    :data:`DFLASH_PROFILE_CONTEXT`.

    Modelled faithfully: the cost tables come from a start-up profile taken before serving
    (``batches_to_profile`` / ``set_initial_cost_curves``), so they cost no served step, and
    are indexed by the exact batch size; the survival EMA -- per position p, the fraction of
    requests that drafted more than p and accepted more than p, blended with weight
    ``history_weight`` and then made non-increasing over positions; the score ``batch * (1 +
    sum(survival[:K])) / (cost(batch, K) + overhead(bucket))`` maximised over the candidates
    (ties to the smaller K); full K below batch 16; a K held for ``decision_interval``
    decisions per bucket; and the manager's ratchet: a bucket's K only moves down, and a
    global cap (the smallest K chosen anywhere) caps every bucket, so K 0 ends speculation
    for good (``ratchet=False`` turns this off).

    Simplified: ``startup_cost(batch, K)`` stands for the profile (upstream: the median of 5
    replays of synthetic decode-only batches per (batch, K + 1) verification shape at the
    profile context, interpolated over batch, plus a drafter cost measured at full K and
    charged to every K > 0, exact for DFlash's parallel drafter). The simulator prices the
    whole step of K without noise (:func:`dflash_startup_cost`), so a serial drafter's
    K-dependent cost is in the table: at least as accurate as upstream's. The runtime
    overhead is ``max(interval - cost(batch, K), 0)`` over steps with K > 0 that verified and
    drafted the same K (upstream times the verification alone against the verify table), EMA'd
    per bucket like upstream; the batch is the decision's, which counts prefilling requests
    too.
    """

    SMALL_BATCH = 16
    CALIBRATION_SAMPLES = 2

    def __init__(self, min_gamma: int, max_gamma: int,
                 startup_cost: Callable[[int, int], float], *, history_weight: float = 0.2,
                 decision_interval: int = 2, ratchet: bool = True) -> None:
        if not 0.0 < history_weight <= 1.0:
            raise ValueError("history_weight must be in (0, 1]")
        if decision_interval < 1:
            raise ValueError("decision_interval must be >= 1")
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        cands = [k for k in dflash_k_candidates(max_gamma) if min_gamma <= k <= max_gamma]
        self.candidates = cands or [max_gamma]
        self.max_k = self.candidates[-1]
        self.startup_cost = startup_cost
        self.weight = history_weight
        self.decision_interval = decision_interval
        self.ratchet = ratchet
        self.survival = [1.0] * max_gamma
        self.overhead: dict[int, float] = {}
        self.overhead_n: dict[int, int] = {}
        self.selected: dict[int, int] = {}
        self.uses: dict[int, int] = {}
        self.global_cap = self.max_k
        self.gamma = self.max_k
        self.scores: dict[int, float] = {}
        # (K, batch) of the decision verified in the next step / of the latest one
        self._prev: tuple[int, int] | None = None
        self._cur: tuple[int, int] | None = None

    # -- decision -----------------------------------------------------------------------------
    def _policy_k(self, batch_size: int) -> int:
        """``DFlashAdaptiveKPolicy.select_k``: the best-scoring candidate for this batch."""
        if batch_size < 1:
            return 0
        if batch_size < self.SMALL_BATCH:
            return self.max_k
        bucket = pow2_bucket(batch_size)
        extra = 0.0
        if self.overhead_n.get(bucket, 0) >= self.CALIBRATION_SAMPLES:
            extra = self.overhead[bucket]
        best_k, best = self.candidates[0], -math.inf
        scores: dict[int, float] = {}
        for k in self.candidates:
            expected = 1.0 + sum(self.survival[:k])
            cost = self.startup_cost(batch_size, k) + extra
            score = batch_size * expected / max(cost, 1e-9)
            scores[k] = score
            if score > best:
                best_k, best = k, score
        self.scores = scores
        return best_k

    def _manager_k(self, batch_size: int) -> int:
        """``DFlashAdaptiveKManager.select_k``: hold per bucket, then ratchet down."""
        if batch_size < 1:
            return self.global_cap
        if self.global_cap == self.candidates[0] and self.ratchet:
            return self.global_cap
        bucket = pow2_bucket(batch_size)
        prev = self.selected.get(bucket)
        uses = self.uses.get(bucket, 0)
        if prev is not None and uses < self.decision_interval:
            self.uses[bucket] = uses + 1
            return min(prev, self.global_cap) if self.ratchet else prev
        k = self._policy_k(batch_size)
        if self.ratchet:
            if prev is not None:
                k = min(prev, k)
            k = min(k, self.global_cap)
            self.global_cap = k
        self.selected[bucket] = k
        self.uses[bucket] = 1
        return k

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The manager's selection for this batch."""
        self.gamma = _clip(self._manager_k(batch_size), self.min_gamma, self.max_gamma)
        self._prev, self._cur = self._cur, (self.gamma, batch_size)
        return self.gamma

    # -- feedback -----------------------------------------------------------------------------
    def _update_survival(self, drafted: Sequence[int], accepted: Sequence[int]) -> None:
        w = self.weight
        s = self.survival
        for pos in range(len(s)):
            n = hits = 0
            for d, a in zip(drafted, accepted, strict=False):
                if d > pos:
                    n += 1
                    if a > pos:
                        hits += 1
            if n == 0:
                break  # nobody drafted this deep, so nobody drafted deeper either
            s[pos] = (1.0 - w) * s[pos] + w * hits / n
        for pos in range(1, len(s)):
            if s[pos] > s[pos - 1]:
                s[pos] = s[pos - 1]

    def observe(self, feedback: StepFeedback) -> None:
        """Survival EMA from every step; the overhead EMA from clean steps with K > 0."""
        if feedback.gamma > 0 and feedback.drafted:
            self._update_survival(feedback.drafted, feedback.accepted)
        prev, cur = self._prev, self._cur
        if prev is None or cur is None or prev[0] != cur[0] or prev[0] != feedback.gamma:
            return
        k, batch = prev
        if k == 0 or feedback.interval_s <= 0 or batch < 1:
            return
        bucket = pow2_bucket(batch)
        seen = max(feedback.interval_s - self.startup_cost(batch, k), 0.0)
        old = self.overhead.get(bucket)
        self.overhead[bucket] = seen if old is None else (
            (1.0 - self.weight) * old + self.weight * seen)
        self.overhead_n[bucket] = self.overhead_n.get(bucket, 0) + 1

    # -- reporting ----------------------------------------------------------------------------
    def settled(self) -> bool:
        """Always: the cost profile was taken before serving, nothing is explored."""
        return True

    def report(self) -> ControllerSnapshot:
        """Latest gamma; estimated tokens/s per candidate from the latest scored bucket."""
        return ControllerSnapshot("vllm-dflash-adaptive-k", self.gamma, dict(self.scores))

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "vllm-dflash-adaptive-k", "gamma": self.gamma,
                "candidates": list(self.candidates), "global_cap": self.global_cap,
                "survival": [round(x, 4) for x in self.survival],
                "selected": {str(b): k for b, k in sorted(self.selected.items())},
                "overhead_ms": {str(b): round(1e3 * v, 4)
                                for b, v in sorted(self.overhead.items())}}


__all__ = [
    "AcceptanceAdaptiveK",
    "DflashAdaptiveK",
    "dflash_k_candidates",
    "dflash_startup_cost",
    "pow2_bucket",
]
