"""Lockstep data parallel: one gamma for all ranks against each rank on its own (pure).

Under MoE data parallel every rank runs each step together, so a step lasts as long as its
slowest rank, and the group's goodput is all ranks' committed tokens over that time. Ranks
differ in batch size and acceptance; an idle rank runs a dummy batch that drafts the step's
gamma (at least one pass). Per step, with the step's loads known (an oracle's view):

* ``agreed-oracle``: the one gamma that maximises the group's goodput;
* ``agreed-vote``: vSpec's rule on a host (adaptive/dp_vote.py): each rank votes the gamma
  best for its own tokens over the group's step time, weighted by its batch;
* ``per-rank-oracle``: every rank its own gamma, the best such split (the upper bound a
  split would reach if the collectives allowed it);
* ``fixed``: the configured K on every rank.

Expected values per step (iid per-position acceptance), no queueing: the model isolates what
one shared gamma costs against per-rank gammas.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vllm_hust_vspec.adaptive import dp_vote
from vllm_hust_vspec.sim.cost import CostModel

POLICIES = ("agreed-oracle", "agreed-vote", "per-rank-oracle", "fixed")


@dataclass(frozen=True, slots=True)
class RankLoad:
    """One rank at one step: decoding requests (0: idle, a dummy batch) and acceptance."""

    batch: int
    acceptance: float


def committed(acceptance: float, gamma: int) -> float:
    """Expected tokens one request commits verifying ``gamma`` drafts (the bonus included)."""
    return sum(acceptance ** k for k in range(gamma + 1))


def rank_time(cost: CostModel, load: RankLoad, gamma: int, context: int) -> float:
    """Seconds of one rank's step at ``gamma`` (gamma 0 keeps the drafter's first pass, as
    under lockstep data parallel; a dummy batch is one request drafting at least one pass)."""
    if load.batch <= 0:
        return cost.step_time(1, 0, max(gamma, 1), 1, 0, context)
    return cost.step_time(load.batch, load.batch * gamma, gamma, load.batch, 0, context,
                          zero_pass=True)


@dataclass(frozen=True, slots=True)
class StepResult:
    """Tokens and seconds of one step under each policy."""

    tokens: dict[str, float]
    seconds: dict[str, float]


def simulate_step(loads: Sequence[RankLoad], cost: CostModel, max_gamma: int,
                  fixed_gamma: int, context: int = 512) -> StepResult:
    """One lockstep step under every policy of :data:`POLICIES`."""
    gammas = range(max_gamma + 1)
    times = [[rank_time(cost, ld, g, context) for g in gammas] for ld in loads]
    toks = [[ld.batch * committed(ld.acceptance, g) for g in gammas] for ld in loads]
    group_t = [max(t[g] for t in times) for g in gammas]
    group_tok = [sum(k[g] for k in toks) for g in gammas]

    def agreed(g: int) -> tuple[float, float]:
        return group_tok[g], group_t[g]

    best = max(gammas, key=lambda g: group_tok[g] / group_t[g])

    def own_best(k: list[float]) -> int:
        # a rank's controller sees its own tokens over the group's (lockstep) step time
        return max(gammas, key=lambda g: k[g] / group_t[g])

    votes: list[tuple[int | None, int]] = [
        (own_best(k), ld.batch) for k, ld in zip(toks, loads, strict=True) if ld.batch > 0]
    vote = dp_vote.agree(votes, max_gamma, fixed_gamma)
    split = _best_split(times, toks)
    out = {"agreed-oracle": agreed(best), "agreed-vote": agreed(vote),
           "per-rank-oracle": split, "fixed": agreed(fixed_gamma)}
    return StepResult({k: v[0] for k, v in out.items()}, {k: v[1] for k, v in out.items()})


def _best_split(times: list[list[float]], toks: list[list[float]]) -> tuple[float, float]:
    """The best goodput with a gamma per rank: for every candidate bottleneck time, each rank
    takes its most productive gamma within it (tokens and time both grow with gamma)."""
    best = (0.0, 1.0)
    floor = max(min(t) for t in times)  # no split runs faster than its slowest rank's minimum
    for bound in sorted({x for t in times for x in t if x >= floor}):
        tokens = 0.0
        slowest = 0.0
        for t, k in zip(times, toks, strict=True):
            fits = [g for g in range(len(t)) if t[g] <= bound]
            if not fits:
                fits = [min(range(len(t)), key=t.__getitem__)]
            g = max(fits, key=k.__getitem__)
            tokens += k[g]
            slowest = max(slowest, t[g])
        if tokens / slowest > best[0] / best[1]:
            best = (tokens, slowest)
    return best


@dataclass(frozen=True, slots=True)
class LockstepScenario:
    """How each rank's load is drawn per step."""

    name: str
    describe: str
    draw: Callable[[random.Random, int, int], RankLoad]  # (rng, rank, ranks) -> load


def _noisy(rng: random.Random, mean: float, spread: float) -> float:
    return min(0.98, max(0.02, rng.gauss(mean, spread)))


SCENARIOS: dict[str, LockstepScenario] = {s.name: s for s in (
    LockstepScenario("alike", "every rank batch 16, acceptance 0.7 +- 0.05",
                     lambda rng, r, n: RankLoad(16, _noisy(rng, 0.7, 0.05))),
    LockstepScenario("mixed-acceptance", "batch 16; half the ranks accept 0.85, half 0.35",
                     lambda rng, r, n: RankLoad(16, _noisy(rng, 0.85 if r % 2 else 0.35,
                                                           0.05))),
    LockstepScenario("skewed-load", "rank 0 batch 64, the others batch 2; acceptance 0.7",
                     lambda rng, r, n: RankLoad(64 if r == 0 else 2, _noisy(rng, 0.7, 0.05))),
    LockstepScenario("half-idle", "half the ranks idle (dummy batches), the rest batch 16 at "
                     "0.7", lambda rng, r, n: RankLoad(16 if r % 2 else 0,
                                                       _noisy(rng, 0.7, 0.05))),
)}


@dataclass(frozen=True, slots=True)
class LockstepReport:
    """Goodput (tokens / s) of each policy over a run, and its ratio to the split oracle."""

    scenario: str
    ranks: int
    goodput: dict[str, float]

    def ratio(self, policy: str) -> float:
        """``policy``'s goodput over the per-rank oracle's."""
        return self.goodput[policy] / self.goodput["per-rank-oracle"]


def run(scenario: LockstepScenario, ranks: int, cost: CostModel, *, max_gamma: int = 5,
        fixed_gamma: int | None = None, steps: int = 40, seed: int = 0) -> LockstepReport:
    """``steps`` lockstep steps of ``ranks`` ranks drawn from ``scenario``."""
    if ranks < 2:
        raise ValueError(f"lockstep data parallel needs >= 2 ranks, got {ranks}")
    rng = random.Random(seed)
    fixed = max_gamma if fixed_gamma is None else fixed_gamma
    tokens = dict.fromkeys(POLICIES, 0.0)
    seconds = dict.fromkeys(POLICIES, 0.0)
    for _ in range(steps):
        loads = [scenario.draw(rng, r, ranks) for r in range(ranks)]
        step = simulate_step(loads, cost, max_gamma, fixed)
        for p in POLICIES:
            tokens[p] += step.tokens[p]
            seconds[p] += step.seconds[p]
    return LockstepReport(scenario.name, ranks, {p: tokens[p] / seconds[p] for p in POLICIES})


def table(cost: CostModel, ranks: Sequence[int] = (2, 4, 8, 16, 32, 64),
          scenarios: Sequence[str] = tuple(SCENARIOS), **kw: int) -> list[LockstepReport]:
    """Every scenario at every rank count."""
    return [run(SCENARIOS[s], n, cost, **kw) for s in scenarios for n in ranks]


__all__ = ["POLICIES", "SCENARIOS", "LockstepReport", "LockstepScenario", "RankLoad",
           "StepResult", "committed", "rank_time", "run", "simulate_step", "table"]
