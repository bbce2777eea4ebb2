#!/usr/bin/env python3
"""Benchmark vSpec's gamma controllers against fixed gamma, baselines and the oracle.

Runs the shipped scenario suite (every policy, several seeds, common random numbers) in the
offline simulator and prints, per scenario, each policy's goodput as a ratio to the best
fixed gamma in hindsight and to the oracle, geomean summary rows (suite, stationary,
non-stationary), the online controller's decide+observe cost per step at batch 128, and
PASS/FAIL per target. Exit code 0 when every target passes, 1 otherwise.

    .venv/bin/python scripts/bench_controller.py [--seeds 3] [--jobs 2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.adaptive import StepFeedback, build_controller  # noqa: E402
from vllm_hust_vspec.sim import (  # noqa: E402
    ScenarioReport,
    all_policies,
    geomean,
    list_scenarios,
    load_scenario,
    run_many,
    summarise,
)
from vllm_hust_vspec.sim.policies import BASELINES  # noqa: E402
from vllm_hust_vspec.sim.runner import seeds_for  # noqa: E402

COLUMNS = ["online", "profile", "oracle", *BASELINES]
SHORT = {"vllm-batch-schedule": "vllm-bs", "sglang-adaptive": "sglang", "hf-heuristic": "hf",
         "vllm-acceptance-adaptive-k": "acc-k", "vllm-dflash-adaptive-k": "dflash",
         "sglang-per-batch-ema": "sgl-bs", "nightjar-bandit": "nghtjar"}
TARGET_STATIONARY = 0.97
TARGET_NONSTATIONARY = 1.05
TARGET_COST_US = 20.0


def _ratio(report: ScenarioReport, policy: str, attr: str) -> float:
    s = report.get(policy)
    return getattr(s, attr) if s is not None else math.nan


def _fmt(x: float) -> str:
    return f"{x:7.3f}" if math.isfinite(x) else "      -"


def print_ratio_table(reports: list[ScenarioReport], attr: str, title: str) -> None:
    """One row per scenario, one column per policy, plus geomean rows."""
    print(f"\n{title}")
    head = f"{'scenario':28s} {'kind':5s} {'best':8s} " + " ".join(
        f"{SHORT.get(c, c):>7s}" for c in COLUMNS)
    print(head)
    print("-" * len(head))
    for rep in reports:
        kind = ("stat" if rep.stationary else "nonst") + ("~" if rep.noisy else "")
        best = (rep.best_fixed_policy or "-").replace("fixed:", "K=")
        print(f"{rep.scenario:28s} {kind:5s} {best:8s} " + " ".join(
            _fmt(_ratio(rep, c, attr)) for c in COLUMNS))
    print("-" * len(head))
    for label, subset in (
        ("geomean (suite)", reports),
        ("geomean (stationary)", [r for r in reports if r.stationary]),
        ("geomean (non-stationary)", [r for r in reports if not r.stationary]),
    ):
        print(f"{label:43s} " + " ".join(
            _fmt(geomean([_ratio(r, c, attr) for r in subset])) for c in COLUMNS))


def controller_cost_us(batch: int = 128, steps: int = 20000, max_gamma: int = 5) -> float:
    """Median microseconds of one decide() + observe() pair of the online controller."""
    ctrl = build_controller("online", min_gamma=0, max_gamma=max_gamma)
    rng = random.Random(7)
    feedbacks = []
    for _ in range(512):
        g = rng.randint(0, max_gamma)
        acc = tuple(min(g, int(rng.expovariate(0.7))) for _ in range(batch))
        feedbacks.append(StepFeedback(
            batch_size=batch, gamma=g, drafted=(g,) * batch, accepted=acc,
            committed=sum(acc) + batch, interval_s=0.01 + 0.002 * g, token_budget=8192))
    samples: list[int] = []
    clock = time.perf_counter_ns
    for i in range(steps):
        fb = feedbacks[i % len(feedbacks)]
        t0 = clock()
        ctrl.decide(batch, 8192)
        ctrl.observe(fb)
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3


def main(argv: list[str] | None = None) -> int:
    """Run the suite and print the report."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--scenario", action="append", default=[],
                    help="limit to these shipped scenarios (repeatable)")
    ap.add_argument("--json", metavar="OUT.json", help="also write all summaries as JSON")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    scenarios = [load_scenario(n) for n in (args.scenario or list_scenarios())]
    tasks = [(sc, p, s, False) for sc in scenarios for p in all_policies(sc)
             for s in seeds_for(sc, args.seeds)]
    results = run_many(tasks, args.jobs)
    reports: list[ScenarioReport] = []
    for sc in scenarios:
        mine = [r for (tsc, _, _, _), r in zip(tasks, results, strict=True) if tsc is sc]
        reports.append(summarise(sc, mine))
    sim_seconds = time.perf_counter() - t_start

    print(f"vSpec controller benchmark: {len(scenarios)} scenarios, every policy x {args.seeds} "
          f"seeds: {len(tasks)} simulations in {sim_seconds:.1f} s with {args.jobs} jobs")
    print("columns: " + ", ".join(f"{short} = {name}" for name, short in SHORT.items()))
    print_ratio_table(reports, "ratio_to_best_fixed",
                      "goodput / best fixed gamma in hindsight (mean over seeds, paired)")
    print_ratio_table(reports, "ratio_to_oracle", "goodput / oracle (mean over seeds, paired)")

    print("\nspread: std of goodput over seeds, % of mean (online | best fixed)")
    for rep in reports:
        on = rep.get("online")
        bf = rep.get(rep.best_fixed_policy or "")
        if on and bf:
            print(f"  {rep.scenario:28s} {100 * on.goodput_std / on.goodput_mean:5.2f}% | "
                  f"{100 * bf.goodput_std / bf.goodput_mean:5.2f}%")

    cost_us = controller_cost_us()
    print(f"\nonline controller decide+observe per step at batch 128: median {cost_us:.2f} us")

    ok_all = True

    def verdict(ok: bool, text: str) -> None:
        nonlocal ok_all
        ok_all &= ok
        print(f"[{'PASS' if ok else 'FAIL'}] {text}")

    print("\ntargets")
    for label, noisy in (("", False), (" with timing noise (~)", True)):
        stat = [r for r in reports if r.stationary and r.noisy == noisy]
        if not stat:
            continue
        misses = [(r.scenario, _ratio(r, "online", "ratio_to_best_fixed")) for r in stat
                  if not _ratio(r, "online", "ratio_to_best_fixed") >= TARGET_STATIONARY]
        worst = min(_ratio(r, "online", "ratio_to_best_fixed") for r in stat)
        verdict(not misses, f"online >= {TARGET_STATIONARY} x best fixed on every stationary "
                f"scenario{label} (worst {worst:.3f})" + "".join(
                    f"; {n} {x:.3f} (short by {TARGET_STATIONARY - x:.3f})"
                    for n, x in misses))
    nonst = [r for r in reports if not r.stationary]
    g_non = geomean([_ratio(r, "online", "ratio_to_best_fixed") for r in nonst])
    per = ", ".join(f"{r.scenario} {_ratio(r, 'online', 'ratio_to_best_fixed'):.3f}"
                    for r in nonst)
    verdict(g_non >= TARGET_NONSTATIONARY, f"online >= {TARGET_NONSTATIONARY} x best fixed on "
            f"non-stationary (geomean {g_non:.3f}; {per})")
    below = [r.scenario for r in nonst
             if not _ratio(r, "online", "ratio_to_best_fixed") >= TARGET_NONSTATIONARY]
    print(f"       per scenario: {len(nonst) - len(below)}/{len(nonst)} non-stationary scenarios"
          f" >= {TARGET_NONSTATIONARY}" + (f" (below: {', '.join(below)})" if below else ""))
    g_online = geomean([_ratio(r, "online", "ratio_to_best_fixed") for r in reports])
    beaten = []
    for b in BASELINES:
        gb = geomean([_ratio(r, b, "ratio_to_best_fixed") for r in reports])
        if not g_online >= gb:
            beaten.append(f"{b} {gb:.3f}")
    verdict(not beaten, f"online >= every published baseline on geomean (online "
            f"{g_online:.3f}" + (f"; beaten by {', '.join(beaten)}" if beaten else "") + ")")
    verdict(cost_us < TARGET_COST_US, f"decide+observe median < {TARGET_COST_US:g} us "
            f"({cost_us:.2f} us)")
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f} s")

    if args.json:
        Path(args.json).write_text(json.dumps({
            "reports": [r.as_dict() for r in reports],
            "controller_cost_us": cost_us,
            "all_pass": ok_all,
        }, indent=2) + "\n", encoding="utf-8")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
