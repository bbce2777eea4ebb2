#!/usr/bin/env python3
"""Why a greedy goodput maximiser loses a closed workload's draining tail, measured.

Every policy here, the oracle included, picks each step's gamma by the batch's expected
committed tokens per second. Once a closed workload stops admitting (the batch falls below
``max_num_seqs``), the tail lasts as long as its slowest requests: tokens a request that
finishes early commits sooner do not shorten it. This script runs the oracle and variants of
it that, while the batch drains, weight each request's expected tokens by its share of the
largest remaining work (``(work / max work) ** power``; work = remaining tokens over the
request's true tokens per step at gamma 1), and one that plays gamma 1 throughout the drain.
It prints busy seconds summed over the seeds and the difference from the oracle: a weighted
variant that beats the oracle shows the drain's objective is the makespan of its slowest
requests, not the batch's token rate.

    .venv/bin/python scripts/sim_drain_weighting.py [shift-code-prose-b32] [--seeds 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.sim.engine import simulate
from vllm_hust_vspec.sim.oracle import Oracle
from vllm_hust_vspec.sim.runner import seeds_for
from vllm_hust_vspec.sim.scenario import Scenario, load_scenario


class DrainWeightedOracle(Oracle):
    """The oracle, except while the batch drains: each request's expected tokens count by
    ``(its remaining work / the largest) ** power``; ``power`` None plays gamma 1 instead."""

    def __init__(self, min_gamma: int, max_gamma: int, full_batch: int,
                 power: float | None) -> None:
        super().__init__(min_gamma, max_gamma)
        self._full = full_batch
        self._power = power

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The oracle's gamma while the batch is full, the weighted one while it drains."""
        sim = self._bound()
        batch = sim.batch
        if not batch or len(batch) >= self._full:
            return super().decide(batch_size, token_budget)
        if self._power is None:
            self.last = max(self.min_gamma, min(1, self.max_gamma))
            return self.last
        work = [max(r.out_len - r.done, 0) / (r.spre[1] if len(r.spre) > 1 else 1.0)
                for r in batch]
        top = max(work) or 1.0
        weights = [(w / top) ** self._power for w in work]
        best, best_val = self.min_gamma, -1.0
        for g in range(self.min_gamma, self.max_gamma + 1):
            tokens = 0.0
            for r, w in zip(batch, weights, strict=True):
                rem = r.out_len - r.done
                k = g if g < rem else rem - 1
                tokens += w * r.spre[k if k > 0 else 0]
            val = tokens / sim.cost.steady_time(len(batch), g, sim.batch_context)
            if val > best_val:
                best, best_val = g, val
        self.last = best
        return best


def busy_seconds(scenario: Scenario, power: float | None | str, seeds: list[int]) -> float:
    """Busy seconds summed over ``seeds``; ``power`` "oracle" runs the plain oracle."""
    total = 0.0
    for seed in seeds:
        if power == "oracle":
            ctrl: Oracle = Oracle(scenario.min_gamma, scenario.max_gamma)
        else:
            assert power is None or isinstance(power, float)
            ctrl = DrainWeightedOracle(scenario.min_gamma, scenario.max_gamma,
                                       scenario.max_num_seqs, power)
        total += simulate(scenario, ctrl, seed, policy="oracle").busy_seconds
    return total


def main(argv: list[str] | None = None) -> int:
    """Print the busy time of the oracle and of its drain-weighted variants."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="shift-code-prose-b32",
                        help="a shipped scenario name or a scenario file")
    parser.add_argument("--seeds", type=int, default=6, help="seeds (default 6)")
    args = parser.parse_args(argv)
    scenario = load_scenario(args.scenario)
    if scenario.workload.arrival.kind != "closed":
        parser.error(f"{scenario.name} has open arrivals: its batch never drains for good")
    seeds = seeds_for(scenario, args.seeds)
    base = busy_seconds(scenario, "oracle", seeds)
    print(f"{scenario.name}: busy seconds over {len(seeds)} seeds; while the batch drains "
          f"(below {scenario.max_num_seqs} requests) the variants weight each request by "
          "its share of the largest remaining work")
    print(f"{'oracle':28s} {base:10.3f}")
    for label, power in (("weighted, power 1", 1.0), ("weighted, power 2", 2.0),
                         ("weighted, power 4", 4.0), ("gamma 1 while draining", None)):
        t = busy_seconds(scenario, power, seeds)
        print(f"{label:28s} {t:10.3f}  {1000 * (t - base):+8.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
