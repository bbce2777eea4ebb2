"""Graph capture sizes: every verify width the controller may ask for must have a graph.

A decode step with gamma drafts per request runs ``batch * (1 + gamma)`` tokens through the
target. With a fixed gamma only widths ``1 + gamma`` matter; with the adaptive controller every
candidate gamma in ``[min_gamma, gamma]`` does, or the steps at other gammas fall back to eager.
A pure function of the settings: the launcher passes the sizes to ``vllm serve`` and the
Ascend worker captures its per-width graphs from the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hust_vspec.settings.fields import Settings

DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_CAPTURE_TOKENS = 2048


@dataclass(frozen=True)
class CapturePlan:
    """Which batch sizes and verify widths get graphs, and the resulting token counts."""

    batch_sizes: tuple[int, ...]
    gammas: tuple[int, ...]
    sizes: tuple[int, ...]


def batch_sizes(policy: str, max_num_seqs: int, refill: int) -> list[int]:
    """Batch sizes to capture under ``policy``.

    exact: every size 1..max; power2: 1, 2, 4, ... and max; steady: 1, the multiples of the
    refill cohort and max (cohort admission keeps batches near those); auto: exact up to 16
    sequences, else power2 plus multiples of 8 (cheap and close to vLLM's own list).
    """
    if policy == "exact":
        return list(range(1, max_num_seqs + 1))
    pow2 = [1 << i for i in range(max_num_seqs.bit_length()) if (1 << i) <= max_num_seqs]
    if policy == "power2":
        return sorted({*pow2, max_num_seqs})
    if policy == "steady":
        return sorted({1, *range(refill, max_num_seqs + 1, refill), max_num_seqs})
    if max_num_seqs <= 16:
        return list(range(1, max_num_seqs + 1))
    return sorted({*pow2, *range(8, max_num_seqs + 1, 8), max_num_seqs})


def capture_plan(s: Settings) -> CapturePlan:
    """The capture plan for these settings (adaptive: every candidate gamma's width)."""
    gamma = s.effective_gamma()
    gammas = (
        tuple(range(s.adaptive_min_gamma, gamma + 1, int(s.tuning("gamma_stride"))))
        if s.adaptive_speculation else (gamma,)
    )
    max_seqs = s.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    cap = min(s.max_num_batched_tokens or DEFAULT_MAX_CAPTURE_TOKENS, DEFAULT_MAX_CAPTURE_TOKENS)
    batches = batch_sizes(s.capture_policy, max_seqs, s.refill_batch())
    sizes = sorted({b * (1 + g) for b in batches for g in gammas if b * (1 + g) <= cap})
    return CapturePlan(tuple(batches), gammas, tuple(sizes))


__all__ = ["DEFAULT_MAX_CAPTURE_TOKENS", "DEFAULT_MAX_NUM_SEQS", "CapturePlan", "batch_sizes",
           "capture_plan"]
