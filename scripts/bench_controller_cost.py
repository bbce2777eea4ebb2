#!/usr/bin/env python3
"""Micro-benchmark: CPU cost of one ``decide`` + ``observe`` pair per engine step.

Prints the median and p90 in microseconds at a given batch size (default 128) for each
controller policy. Feedback objects are pre-built (the host builds them anyway), so the figure
is the controller's own cost. Not a test: speed is reported, never asserted.

    .venv/bin/python scripts/bench_controller_cost.py [--batch 128] [--steps 20000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.adaptive import StepFeedback, build_controller
from vllm_hust_vspec.adaptive.profile import Profile

_EXAMPLE_PROFILE = {
    "schema_version": 1,
    "target": {"constant_s": 0.010, "per_batched_token_s": 2e-5, "per_context_token_s": 1e-9},
    "draft": {"constant_s": 0.0008, "per_batched_token_s": 2e-6, "per_context_token_s": 0.0},
    "per_gamma_overhead_s": 0.0001,
    "assumed_context_tokens": 1024,
    "default_acceptance": 0.7,
}


def _feedbacks(batch: int, max_gamma: int, seed: int) -> dict[int, list[StepFeedback]]:
    """Pre-built feedback per verified gamma (a few variants each, random acceptance)."""
    rng = random.Random(seed)
    out: dict[int, list[StepFeedback]] = {}
    for g in range(max_gamma + 1):
        variants = []
        for _ in range(16):
            acc = []
            for _ in range(batch):
                a = 0
                while a < g and rng.random() < 0.7:
                    a += 1
                acc.append(a)
            step_s = (0.010 + 2e-5 * batch * (1 + g) + 0.0008 * g) * (1 + 0.05 * rng.gauss(0, 1))
            variants.append(StepFeedback(
                batch_size=batch, gamma=g, drafted=(g,) * batch, accepted=tuple(acc),
                committed=sum(acc) + batch, interval_s=step_s, token_budget=8192,
            ))
        out[g] = variants
    return out


def bench(
    policy: str, batch: int, steps: int, max_gamma: int, profile_path: str | None
) -> list[float]:
    """Per-step decide+observe cost in microseconds."""
    ctrl = build_controller(policy, min_gamma=0, max_gamma=max_gamma, profile_path=profile_path)
    fbs = _feedbacks(batch, max_gamma, seed=0)
    prev = max_gamma
    costs: list[float] = []
    clock = time.perf_counter_ns
    for i in range(steps):
        fb = fbs[prev][i & 15]
        t0 = clock()
        g = ctrl.decide(batch, 8192)
        ctrl.observe(fb)
        costs.append((clock() - t0) / 1000.0)
        prev = g
    return costs[steps // 10:]  # drop the warm-up / sweep phase


def main(argv: list[str] | None = None) -> int:
    """Print a table of median / p90 microseconds per step for each policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128, help="decode batch size (default 128)")
    parser.add_argument("--steps", type=int, default=20000, help="steps per policy")
    parser.add_argument("--max-gamma", type=int, default=4, help="largest gamma (default 4)")
    args = parser.parse_args(argv)
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        path.write_text(json.dumps(Profile.from_dict(_EXAMPLE_PROFILE).to_dict()))
        print(f"decide+observe cost per step, batch {args.batch}, max_gamma {args.max_gamma}, "
              f"{args.steps} steps, {sys.implementation.name} {sys.version.split()[0]}")
        print(f"{'policy':10s} {'median_us':>10s} {'p90_us':>8s}")
        for policy in ("online", "profile", "fixed"):
            costs = bench(policy, args.batch, args.steps, args.max_gamma, str(path))
            costs.sort()
            print(f"{policy:10s} {statistics.median(costs):10.2f} "
                  f"{costs[int(0.9 * len(costs))]:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
