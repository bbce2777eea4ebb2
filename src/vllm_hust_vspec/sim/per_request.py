"""Per-request verify lengths in the simulator: the per-request oracle and vLLM's adaptive
verification as a baseline.

Both answer :meth:`verify_lengths` (adaptive.feedback.LengthPolicy): before a step's target
pass the engine asks how many of each request's pending drafts to verify, and prices the
step by the tokens it verifies (the drafter still drafted its full depth for everyone, as a
host drafts).

* :class:`PerRequestOracle` knows each request's true conditional acceptance: it ranks every
  (request, position) slot by its survival probability and verifies the prefix of that
  ranking with the best expected goodput under the scenario's own cost model; its draft depth
  is the one whose best trimmed step has the best expected goodput. An upper reference that
  does not plan across steps, like :class:`~.oracle.Oracle`.
* :class:`VllmAdaptiveVerification` models Model Runner V2's ``enable_adaptive_verification``
  (vLLM 0.33.0, ``vllm/v1/worker/gpu/spec_decode/adaptive_verification.py``, PR #47808): the
  drafter always drafts K; cost tables are profiled at start-up (draft cost by request count,
  verify cost by token count: ``build_cost_tables_from_curves``); each step ``get_num_tokens``
  scores every slot by the cumulative product of the drafter's per-position confidences *of
  the previous step* (its stale D2H copy; 1.0 for a new request), sorts them and picks the
  draft budget ``n`` maximising ``(sampling requests + top-n scores) / (draft_cost[reqs] +
  verify_cost[non-draft tokens + n])``; ``reallocate_drafts`` then hands the budget out by a
  global top-k over the *current* confidences' survival (``_assign_draft_token_budget``).
  Profiled costs here come from the scenario's cost model at the median context, as the
  profile's dummy runs do (``VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, cast

from ..adaptive.feedback import SettledPolicy, StepFeedback, VerifyQuery
from .oracle import Oracle

if TYPE_CHECKING:
    from .scenario import Scenario


def _best_prefix(scores: list[float], base_value: float,
                 time_of: Any) -> tuple[int, float]:
    """``n`` maximising ``(base_value + sum(scores[:n])) / time_of(n)`` (scores descending)."""
    best_n, best = 0, base_value / time_of(0)
    value = base_value
    for n, s in enumerate(scores, 1):
        value += s
        g = value / time_of(n)
        if g > best:
            best_n, best = n, g
    return best_n, best


class PerRequestOracle(Oracle):
    """Knows every request's acceptance; verifies the best ranked prefix of slots."""

    def _slots(self, reqs: list[Any], depth: int) -> list[tuple[float, int]]:
        out = []
        for i, r in enumerate(reqs):
            rem = r.out_len - r.done
            s = 1.0
            for k in range(min(depth, max(rem - 1, 0))):
                s *= r.cond[k]
                out.append((s, i))
        out.sort(reverse=True)
        return out

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The depth whose best trimmed step has the best expected goodput."""
        sim = self._bound()
        reqs = sim.batch
        if not reqs:
            return self.min_gamma
        b, ctx, cost = len(reqs), sim.batch_context, sim.cost
        best, best_val = self.min_gamma, -1.0
        for g in range(self.min_gamma, self.max_gamma + 1):
            scores = [s for s, _ in self._slots(reqs, g)]

            def t(n: int, g: int = g) -> float:
                return float(cost.step_time(b, n, g, b if g else 0, 0, ctx))

            _, val = _best_prefix(scores, float(b), t)
            if val > best_val:
                best, best_val = g, val
        self.last = best
        return best

    def verify_lengths(self, query: VerifyQuery) -> list[int]:
        """The ranked prefix of slots with the best expected goodput this step."""
        sim = self._bound()
        reqs = [sim.live[cast(int, rid)] for rid in query.request_ids]
        depth = max(query.drafted, default=0)
        slots = [(s, i) for s, i in self._slots(reqs, depth)]
        cap = list(query.drafted)
        taken = [0] * len(reqs)
        ranked: list[tuple[float, int]] = []
        for s, i in slots:  # a request's slots come in order (survival only decreases)
            if taken[i] < cap[i]:
                taken[i] += 1
                ranked.append((s, i))
        b, ctx, cost = len(reqs), sim.batch_context, sim.cost

        def t(n: int) -> float:
            return float(cost.step_time(b, n, depth, b, 0, ctx))

        n, _ = _best_prefix([s for s, _ in ranked], float(b), t)
        out = [0] * len(reqs)
        for _, i in ranked[:n]:
            out[i] += 1
        return out

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "per-request-oracle", "gamma": self.last}


class VllmAdaptiveVerification(SettledPolicy):
    """Model Runner V2's adaptive verification (see the module docstring)."""

    wants_confidence = True

    def __init__(self, scenario: Scenario) -> None:
        self.k = scenario.max_gamma
        self.max_reqs = scenario.max_num_seqs
        w = scenario.workload
        ctx_per_req = int(w.prompt_len.mean_hint + 0.5 * w.output_len.mean_hint)
        cost = scenario.cost
        max_tokens = self.max_reqs * (1 + self.k)
        # verify_cost[t]: a target pass over t tokens; draft_cost[r]: K draft passes for r
        # requests (the rest of a K-step), both at the profile's context
        self.verify_cost = [float(cost.step_time(max(t, 1), 0, 0, 0, 0, ctx_per_req * max(t, 1)))
                            for t in range(max_tokens + 1)]
        self.draft_cost = [0.0] + [
            max(0.0, float(cost.step_time(r, r * self.k, self.k, r, 0, ctx_per_req * r))
                - self.verify_cost[r * (1 + self.k)])
            for r in range(1, self.max_reqs + 1)]
        self._stale: dict[Hashable, tuple[float, ...]] = {}
        self.budgets = 0
        self.trimmed = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Always K: adaptive verification trims verification, never drafting."""
        return self.k

    def verify_lengths(self, query: VerifyQuery) -> list[int]:
        """``get_num_tokens`` (stale confidences) then ``reallocate_drafts`` (current)."""
        drafted = query.drafted
        current = query.confidence or tuple((1.0,) * d for d in drafted)
        reqs = len(drafted)
        stale = [self._stale.get(rid, ()) for rid in query.request_ids]
        scores: list[float] = []
        for d, conf in zip(drafted, stale, strict=True):
            s = 1.0
            for k in range(d):
                s *= conf[k] if k < len(conf) else 1.0
                scores.append(s)
        scores.sort(reverse=True)
        dc = self.draft_cost[min(reqs, self.max_reqs)]
        vc = self.verify_cost
        top = len(vc) - 1

        def t(n: int) -> float:
            return dc + vc[min(reqs + n, top)]

        budget, _ = _best_prefix(scores, float(reqs), t)
        for rid, conf in zip(query.request_ids, current, strict=True):
            self._stale[rid] = conf
        if len(self._stale) > 4 * self.max_reqs:  # finished requests
            live = set(query.request_ids)
            self._stale = {r: c for r, c in self._stale.items() if r in live}
        total = sum(drafted)
        self.budgets += 1
        self.trimmed += total - budget
        if budget >= total:
            return list(drafted)
        slots: list[tuple[float, int]] = []
        for i, (d, conf) in enumerate(zip(drafted, current, strict=True)):
            s = 1.0
            for k in range(d):
                s *= conf[k]
                slots.append((s, i))
        slots.sort(reverse=True)
        out = [0] * reqs
        for _, i in slots[:budget]:
            out[i] += 1
        return out

    def observe(self, feedback: StepFeedback) -> None:
        """Nothing to learn online (the cost tables are fixed at start-up)."""

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "vllm-adaptive-verification", "gamma": self.k,
                "trimmed_drafts": self.trimmed}


__all__ = ["PerRequestOracle", "VllmAdaptiveVerification"]
