"""SpecRhythm's per-request TPOT-SLO draft budgets as a simulator baseline.

Re-implemented from the rules of the SpecSLO core patch of vLLM-HUST (the scheduler-side
``SpecRhythmPolicy`` that vLLM-Ascend-HUST's ``spec_rhythm`` speculative-config switch turns
on); no code is copied. What the rules say, and what this module does:

* **Per-request state.** Each request keeps its arrival time, its TPOT SLO (if any), the drafts
  it had verified and accepted, the decode time of those steps and an EMA of its per-step
  acceptance (``accepted / proposed``, weight ``acceptance_ema_alpha`` = 0.2, starting at 1.0).
  The scheduler records a request only in steps that verified drafts for it; the decode time
  recorded is the step's time from scheduling to its output.
* **Roofline cap.** ``cap = min(max_gamma, roofline[key])`` for the first key present of
  ``"B:ctx_bucket"``, ``"batch:B"``, ``"default"`` (B = decoding requests in the step,
  ``ctx_bucket = ceil(context / 512)``), never below ``min_gamma``.
* **Budget.** A request without an SLO gets the cap. Otherwise, with ``slo`` its TPOT SLO:
  ``urgency = clamp(max(time since arrival, projected wait, observed TPOT) / slo)``, where the
  observed TPOT is decode time per accepted draft; ``progress_gap = clamp((time since arrival
  - decode time) / slo)``; ``confidence = clamp(acceptance EMA)``; ``score = 0.55 urgency +
  0.25 progress_gap + 0.20 confidence``, multiplied by ``confidence / acceptance_floor`` when
  the confidence is below the floor (0.4); ``gamma = round(min_gamma + min(1, score) * (cap -
  min_gamma))`` clipped to ``min_gamma..cap``. Urgency raises a budget: a request behind its SLO
  drafts deeper, a request whose drafts are rejected drafts shallower.
* **One cap for the batch, per-request trims.** The scheduler plans every decoding request of
  the step and sets the step's ``num_spec_tokens_to_schedule`` to ``min(K, max(budgets))``;
  each request's drafts are cut to its own budget when they arrive, so the drafter runs the
  batch cap for everyone and the target verifies each request's budget. Here: ``decide``
  returns the cap, ``verify_lengths`` (adaptive.feedback.LengthPolicy) trims the drafts made
  after the step to the budgets planned in it. A request that was still prefilling when the
  step was planned has no budget yet and keeps all its drafts.

Left out: eager continuations and the two home batches (metadata only on the vLLM V1 path; the
dual-batch overlap runs only in the native PEARL engine), per-request gamma overrides and the
projected wait (no V1 code sets it, so it stays 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...adaptive.feedback import SettledPolicy, StepFeedback, VerifyQuery

if TYPE_CHECKING:
    from ..engine import Simulation
    from ..scenario import Scenario

CONTEXT_BUCKET_TOKENS = 512
# The score's weights on urgency, progress gap and acceptance confidence.
URGENCY_WEIGHT = 0.55
PROGRESS_WEIGHT = 0.25
CONFIDENCE_WEIGHT = 0.20


def _clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return lo if x < lo else (hi if x > hi else x)


@dataclass(slots=True)
class RhythmState:
    """What the scheduler knows about one request (times in milliseconds but ``arrival_s``)."""

    arrival_s: float
    slo_tpot_ms: float | None = None
    accepted_tokens: int = 0
    proposed_tokens: int = 0
    decode_elapsed_ms: float = 0.0
    projected_wait_ms: float = 0.0
    acceptance_ema: float = 1.0

    @property
    def observed_tpot_ms(self) -> float:
        """Decode time per accepted draft (0 before any draft was accepted)."""
        if self.accepted_tokens <= 0:
            return 0.0
        return self.decode_elapsed_ms / self.accepted_tokens

    def record(self, accepted: int, proposed: int, elapsed_ms: float, alpha: float) -> None:
        """Fold one verification of this request into its counters and acceptance EMA."""
        accepted, proposed = max(0, accepted), max(0, proposed)
        self.accepted_tokens += accepted
        self.proposed_tokens += proposed
        self.decode_elapsed_ms += max(0.0, elapsed_ms)
        if proposed:
            self.acceptance_ema = (alpha * _clamp(accepted / proposed)
                                   + (1.0 - alpha) * self.acceptance_ema)


@dataclass(frozen=True, slots=True)
class RhythmPlan:
    """One request's draft budget for the next step and the terms it came from."""

    gamma: int
    cap: int
    urgency: float
    progress_gap: float
    confidence: float


class SpecRhythmRules:
    """The budget rule alone (no simulator): roofline cap and per-request plan."""

    def __init__(self, min_gamma: int, max_gamma: int, *, acceptance_floor: float = 0.4,
                 acceptance_ema_alpha: float = 0.2,
                 roofline: Mapping[str, int] | None = None) -> None:
        if min_gamma < 1:
            raise ValueError("SpecRhythm's min_gamma must be at least 1")
        if max_gamma < min_gamma:
            raise ValueError("SpecRhythm's max_gamma must be >= min_gamma")
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self.acceptance_floor = _clamp(acceptance_floor)
        self.alpha = _clamp(acceptance_ema_alpha, 1e-6, 1.0)
        self.roofline = {str(k): int(v) for k, v in (roofline or {}).items()}

    def roofline_cap(self, batch_size: int, context_len: int) -> int:
        """The first roofline entry for (batch, context bucket), batch, default; within
        ``min_gamma..max_gamma``."""
        bucket = max(1, math.ceil(max(1, context_len) / CONTEXT_BUCKET_TOKENS))
        cap = self.max_gamma
        for key in (f"{batch_size}:{bucket}", f"batch:{batch_size}", "default"):
            if key in self.roofline:
                cap = min(cap, self.roofline[key])
                break
        return max(self.min_gamma, min(self.max_gamma, cap))

    def plan(self, state: RhythmState, *, batch_size: int, context_len: int,
             now_s: float) -> RhythmPlan:
        """The request's budget at time ``now_s`` in a step of ``batch_size`` decoding
        requests (see the module docstring for the rule)."""
        cap = self.roofline_cap(batch_size, context_len)
        confidence = _clamp(state.acceptance_ema)
        slo = state.slo_tpot_ms
        if slo is None:
            return RhythmPlan(cap, cap, 0.0, 0.0, confidence)
        since_arrival_ms = max(0.0, (now_s - state.arrival_s) * 1e3)
        urgency = _clamp(max(since_arrival_ms, state.projected_wait_ms,
                             state.observed_tpot_ms) / slo)
        gap = _clamp(max(0.0, since_arrival_ms - state.decode_elapsed_ms) / slo)
        score = URGENCY_WEIGHT * urgency + PROGRESS_WEIGHT * gap + CONFIDENCE_WEIGHT * confidence
        if confidence < self.acceptance_floor:
            score *= confidence / max(self.acceptance_floor, 1e-6)
        lo = self.min_gamma
        gamma = int(round(lo + min(1.0, score) * (cap - lo)))
        return RhythmPlan(max(lo, min(cap, gamma)), cap, urgency, gap, confidence)


def profiled_roofline(scenario: Scenario, min_gamma: int) -> dict[str, int]:
    """A ``"batch:B"`` roofline for every batch size: the gamma (>= ``min_gamma``) with the
    best expected goodput under the scenario's cost model at a typical context and its mean
    acceptance (first phase), as an operator would tune the table from an offline sweep."""
    w = scenario.workload
    per_req_ctx = w.prompt_len.mean_hint + 0.5 * w.output_len.mean_hint
    rates = scenario.acceptance.phases[0].model.mean_rates(max(scenario.max_gamma, 1))
    tokens = [1.0]  # expected tokens a request commits at gamma g
    surv = 1.0
    for c in rates:
        surv *= c
        tokens.append(tokens[-1] + surv)
    table: dict[str, int] = {}
    for b in range(1, scenario.max_num_seqs + 1):
        ctx = int(b * per_req_ctx)
        best = max(range(min_gamma, scenario.max_gamma + 1),
                   key=lambda g: b * tokens[g] / scenario.cost.steady_time(b, g, ctx))
        table[f"batch:{b}"] = best
    return table


class SpecRhythmBaseline(SettledPolicy):
    """SpecRhythm on the vLLM V1 path: one drafting cap per step, per-request trims."""

    def __init__(self, rules: SpecRhythmRules, *, name: str = "spec-rhythm") -> None:
        self.rules = rules
        self.name = name
        self.states: dict[int, RhythmState] = {}
        self.budgets: dict[int, int] = {}  # planned in the latest step, by request id
        self.last_cap = rules.max_gamma
        self.trimmed = 0
        self._sim: Simulation | None = None

    def bind_simulation(self, sim: Simulation) -> None:
        """Called by the engine: the scheduler's view of its requests and clock."""
        self._sim = sim

    def _state(self, rid: int, arrival_s: float, slo_tpot_ms: float | None) -> RhythmState:
        st = self.states.get(rid)
        if st is None:
            st = self.states[rid] = RhythmState(arrival_s, slo_tpot_ms)
        return st

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Plan every decoding request of the step; the drafting cap is the largest budget
        (K when no request is decoding yet)."""
        sim = self._sim
        if sim is None:
            raise RuntimeError("the spec-rhythm policy only runs inside the simulator")
        decoding = [r for r in sim.batch if r.decoding]
        if not decoding:
            self.budgets = {}
            self.last_cap = self.rules.max_gamma
            return self.last_cap
        b = len(decoding)
        budgets: dict[int, int] = {}
        for r in decoding:
            st = self._state(r.rid, r.arrival, r.slo_tpot_ms)
            plan = self.rules.plan(st, batch_size=b, context_len=r.prompt_len + r.done,
                                   now_s=sim.now)
            budgets[r.rid] = plan.gamma
        self.budgets = budgets
        self.last_cap = min(self.rules.max_gamma, max(budgets.values()))
        return self.last_cap

    def verify_lengths(self, query: VerifyQuery) -> list[int]:
        """Each request's drafts cut to the budget planned for it (unplanned: all)."""
        out = []
        for rid, d in zip(query.request_ids, query.drafted, strict=True):
            n = min(d, self.budgets.get(rid, d)) if isinstance(rid, int) else d
            self.trimmed += d - n
            out.append(n)
        return out

    def observe(self, feedback: StepFeedback) -> None:
        """Record each request that verified drafts in the step (as the scheduler does)."""
        ms = feedback.interval_s * 1e3
        for rid, d, a in zip(feedback.request_ids or (), feedback.drafted, feedback.accepted,
                             strict=False):
            st = self.states.get(rid) if isinstance(rid, int) else None
            if st is not None and d > 0:
                st.record(a, d, ms, self.rules.alpha)
        sim = self._sim
        if sim is not None and len(self.states) > 4 * max(len(sim.live), 16):
            # finished requests leave the scheduler (``forget``)
            self.states = {k: v for k, v in self.states.items() if k in sim.live}

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": self.name, "gamma": self.last_cap, "trimmed_drafts": self.trimmed}


def make_spec_rhythm(scenario: Scenario, *, roofline: bool) -> SpecRhythmBaseline:
    """The baseline on ``scenario``: ``min_gamma`` at least 1 (SpecRhythm always drafts),
    ``max_gamma`` the scenario's; with ``roofline``, :func:`profiled_roofline`."""
    lo = max(1, scenario.min_gamma)
    hi = max(lo, scenario.max_gamma)
    table = profiled_roofline(scenario, lo) if roofline else None
    return SpecRhythmBaseline(SpecRhythmRules(lo, hi, roofline=table),
                              name="spec-rhythm-roofline" if roofline else "spec-rhythm")


__all__ = ["RhythmPlan", "RhythmState", "SpecRhythmBaseline", "SpecRhythmRules",
           "make_spec_rhythm", "profiled_roofline"]
