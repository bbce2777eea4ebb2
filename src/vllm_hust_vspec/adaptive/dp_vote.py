"""One gamma for a lockstep data-parallel group, from every rank's vote (pure).

Each rank's controller votes for a gamma and weighs its vote by the requests it decodes this
step (an idle rank, running a dummy batch, weighs nothing). The votes travel as one small
integer vector that an all-reduce SUM combines (:func:`encode`), so every rank decodes the
same totals and computes the same gamma (:func:`decode`): the batch-weighted mean of the
votes, rounded to the nearest integer. A rank that asks for the fallback makes every rank use
the fallback gamma for that step; a step on which no rank decodes drafts ``idle_gamma``.
"""

from __future__ import annotations

from collections.abc import Sequence

# Positions in the vector: sum of weight * vote, sum of weight, ranks asking for the fallback,
# ranks that took part.
WEIGHTED, WEIGHT, FALLBACK, RANKS = range(4)
WIDTH = 4


def encode(vote: int | None, weight: int, fallback: bool = False) -> list[int]:
    """This rank's share of the all-reduce: ``vote`` (None: an idle rank) weighted by its
    batch size."""
    if vote is None or weight <= 0:
        return [0, 0, int(fallback), 1]
    if vote < 0:
        raise ValueError(f"a gamma vote must be >= 0, got {vote}")
    return [int(vote) * int(weight), int(weight), int(fallback), 1]


def decode(totals: Sequence[int], max_gamma: int, fallback_gamma: int,
           idle_gamma: int = 0) -> int:
    """The group's gamma from the summed vectors of every rank."""
    if len(totals) != WIDTH:
        raise ValueError(f"the vote totals have {len(totals)} entries, expected {WIDTH}")
    if totals[FALLBACK] > 0:
        return fallback_gamma
    weight = int(totals[WEIGHT])
    if weight <= 0:
        return idle_gamma
    # round half up in integers: floor(mean + 1/2)
    gamma = (2 * int(totals[WEIGHTED]) + weight) // (2 * weight)
    return max(0, min(gamma, max_gamma))


def agree(votes: Sequence[tuple[int | None, int]], max_gamma: int, fallback_gamma: int,
          idle_gamma: int = 0) -> int:
    """The gamma a group of ranks voting ``(vote, weight)`` agrees on (what the all-reduce
    computes, in one process: the simulator's rule)."""
    totals = [0] * WIDTH
    for vote, weight in votes:
        for i, x in enumerate(encode(vote, weight)):
            totals[i] += x
    return decode(totals, max_gamma, fallback_gamma, idle_gamma)


__all__ = ["FALLBACK", "RANKS", "WEIGHT", "WEIGHTED", "WIDTH", "agree", "decode", "encode"]
