"""Confidence stop: cut a request's draft after its first uncertain position.

The drafter's own distribution says when it is guessing. A position is *uncertain* when

* rule ``"entropy"``: the entropy (nats) of its top-k probabilities, with the mass outside the
  top-k counted as one more outcome, is above ``threshold`` (this is a lower bound of the full
  entropy, so a truncated top-k never makes a position look more certain than it is); or
* rule ``"margin"``: top-1 minus top-2 probability is below ``threshold``; or
* rule ``"topk-entropy"`` (0.14.3's): the entropy of the top-k probabilities
  renormalized to sum to one is above ``threshold`` (0.14.3 compared entropy times a
  scale with a squared threshold; :func:`scaled_threshold` turns its two knobs into this one).

The uncertain token itself is kept (it still has a fair chance of acceptance and costs nothing
more to verify), the positions after it are dropped: they are conditioned on a guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Rule = Literal["topk-entropy", "entropy", "margin"]
RULES: tuple[str, ...] = ("topk-entropy", "entropy", "margin")


def position_uncertain(topk: Sequence[float], rule: Rule, threshold: float) -> bool:
    """True when one draft position's top-k probabilities are below the confidence bar."""
    if rule == "margin":
        first = second = 0.0
        for p in topk:
            if p > first:
                first, second = p, first
            elif p > second:
                second = p
        return first - second < threshold
    if rule == "entropy":
        h = 0.0
        mass = 0.0
        for p in topk:
            if p > 0.0:
                h -= p * math.log(p)
                mass += p
        rest = 1.0 - mass
        if rest > 1e-12:
            h -= rest * math.log(rest)
        return h > threshold
    if rule == "topk-entropy":
        mass = sum(p for p in topk if p > 0.0)
        if mass <= 0.0:
            return True
        h = -sum((p / mass) * math.log(p / mass) for p in topk if p > 0.0)
        return h > threshold
    raise ValueError(f"unknown confidence rule {rule!r}; allowed: {', '.join(RULES)}")


def _check(rule: str, threshold: float) -> None:
    if rule not in RULES:
        raise ValueError(f"unknown confidence rule {rule!r}; allowed: {', '.join(RULES)}")
    if not math.isfinite(threshold) or threshold < 0:
        raise ValueError(f"confidence threshold must be a finite number >= 0, got {threshold!r}")


def scaled_threshold(threshold: float, scale: float | None) -> float:
    """The entropy bar of rule ``topk-entropy`` from 0.14.3's two knobs.

    A position was uncertain when ``entropy * scale > threshold ** 2``, i.e. when the entropy
    exceeds ``threshold ** 2 / scale``: a larger scale stops earlier. ``None`` keeps
    ``threshold`` as the bar itself (the other rules).
    """
    if scale is None:
        return threshold
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not (
            math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"confidence threshold scale must be a finite number > 0, got {scale!r}")
    value = threshold * threshold / float(scale)
    _check("entropy", value)
    return value


def confidence_keep(
    topk_probs: Sequence[Sequence[float]],
    *,
    rule: Rule = "entropy",
    threshold: float,
    min_keep: int = 0,
) -> int:
    """Number of draft tokens to keep for one request.

    ``topk_probs[k]`` holds the drafter's top-k probabilities at draft position ``k`` (any
    order). Keeps positions up to and including the first uncertain one, never fewer than
    ``min_keep`` (capped at the number of positions).
    """
    _check(rule, threshold)
    n = len(topk_probs)
    for k, probs in enumerate(topk_probs):
        if position_uncertain(probs, rule, threshold):
            return max(k + 1, min(min_keep, n))
    return n


def confidence_keep_batch(
    batch_topk_probs: Sequence[Sequence[Sequence[float]]],
    *,
    rule: Rule = "entropy",
    threshold: float,
    min_keep: int = 0,
) -> list[int]:
    """:func:`confidence_keep` for every request of a batch (plain lists in, list out)."""
    _check(rule, threshold)
    return [confidence_keep(r, rule=rule, threshold=threshold, min_keep=min_keep)
            for r in batch_topk_probs]
