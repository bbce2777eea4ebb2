"""Tensor adapter of the confidence (entropy) stop: draft logits in, per-request keep counts out.

The rule itself is the pure one in :mod:`vllm_hust_vspec.adaptive.confidence`; this module only
turns the drafter's logits into the top-k probabilities that rule reads, and the rule's answer
into truncated draft lists. Host independent (pure torch, any device).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vllm_hust_vspec.adaptive.confidence import Rule, confidence_keep_batch

DEFAULT_TOPK = 4
# Defaults per rule when confidence_stop_threshold is unset. Entropy (nats) of the top-4 plus
# the rest: a confident position is near 0, a uniform guess over 5 outcomes is ln 5 = 1.61.
# Rule topk-entropy keeps the predecessor's defaults: top-2, threshold 0.3, scale 0.15 (an
# entropy bar of 0.3**2 / 0.15 = 0.6 nats of the renormalized top-2; ln 2 = 0.69 at most).
DEFAULT_THRESHOLD = {"topk-entropy": 0.3, "entropy": 1.0, "margin": 0.2}
DEFAULT_TOPK_BY_RULE = {"topk-entropy": 2, "entropy": DEFAULT_TOPK, "margin": DEFAULT_TOPK}
DEFAULT_SCALE = {"topk-entropy": 0.15}


def topk_probs(logits: torch.Tensor, k: int = DEFAULT_TOPK) -> torch.Tensor:
    """``[B, k]`` largest softmax probabilities of each row of ``[B, V]`` logits (float32)."""
    probs = logits.float().softmax(dim=-1)
    return probs.topk(min(k, probs.shape[-1]), dim=-1).values


def keep_counts(
    steps: Sequence[torch.Tensor],
    *,
    rule: Rule = "entropy",
    threshold: float,
    min_keep: int = 1,
) -> list[int]:
    """Draft tokens to keep per request, from one ``[B, k]`` top-k tensor per draft position.

    Position ``j`` of every request is ``steps[j]``; returns ``B`` counts in ``0..len(steps)``
    (at least ``min_keep`` when there are positions).
    """
    if not steps:
        return []
    stacked = torch.stack([s.float() for s in steps], dim=1).cpu()  # [B, S, k]
    return confidence_keep_batch(
        stacked.tolist(), rule=rule, threshold=threshold, min_keep=min_keep
    )


def truncate(drafts: Sequence[Sequence[int]], keep: Sequence[int]) -> list[list[int]]:
    """Each request's draft list cut to its keep count (rows beyond ``keep`` stay whole)."""
    out = []
    for i, row in enumerate(drafts):
        n = keep[i] if i < len(keep) else len(row)
        out.append(list(row[:n]))
    return out


__all__ = ["DEFAULT_SCALE", "DEFAULT_THRESHOLD", "DEFAULT_TOPK", "DEFAULT_TOPK_BY_RULE",
           "keep_counts", "topk_probs", "truncate"]
