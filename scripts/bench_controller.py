#!/usr/bin/env python3
"""Benchmark vSpec's gamma controllers against fixed gamma, baselines and the oracle.

Runs the shipped scenario suite (every policy, several seeds, common random numbers) in the
offline simulator and prints, per scenario, each policy's goodput as a ratio to the best
fixed gamma in hindsight and to the oracle, geomean summary rows (suite, stationary,
non-stationary), the decide+observe cost per step at batch 128 of the online controller, and
PASS/FAIL per target. Exit code 0 when every target passes, 1 otherwise. "No scenario worse
than before" compares with sim/data/online_v1_reference.json: the previous online controller
(UCB over a load filter, since replaced) measured by this script at 12 seeds; with
``--sampler-seeds K`` it reads the online controller's mean over its K sampler seeds (the
previous controller drew nothing).

``--per-request`` runs the per-request verify lengths instead (their bars): on every
scenario, vSpec's online controller with and without adaptive/verify_lengths.py, the
per-request oracle and vLLM's adaptive verification (sim/per_request.py), with the bars
for heterogeneous scenarios (tagged ``heterogeneous``) and homogeneous ones and the cost of
decide + verify_lengths + observe at batch 128.

    .venv/bin/python scripts/bench_controller.py [--seeds 3] [--jobs 2] [--json OUT.json]
    .venv/bin/python scripts/bench_controller.py --per-request [--seeds 6] [--scenario NAME]

``--cost`` only times the controllers: the median and p90 microseconds of one ``decide`` +
``observe`` pair per engine step at ``--batch`` (default 128) for the online, profile and fixed
policies, on pre-built feedback (the host builds it anyway), so the figure is the controller's
own cost. Speed is reported, never asserted.

    .venv/bin/python scripts/bench_controller.py --cost [--batch 128] [--steps 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import vllm_hust_vspec.sim
from vllm_hust_vspec.adaptive import StepFeedback, build_controller
from vllm_hust_vspec.adaptive.profile import Profile
from vllm_hust_vspec.sim import (
    ScenarioReport,
    all_policies,
    geomean,
    list_scenarios,
    load_scenario,
    run_many,
    summarise,
)
from vllm_hust_vspec.sim.policies import BASELINES, fixed_names
from vllm_hust_vspec.sim.runner import paired_ratio, seeds_for

COLUMNS = ["online", "profile", "oracle", *BASELINES]
SHORT = {"vllm-batch-schedule": "vllm-bs", "sglang-adaptive": "sglang",
         "hf-heuristic": "hf",
         "vllm-acceptance-adaptive-k": "acc-k", "vllm-dflash-adaptive-k": "dflash",
         "sglang-per-batch-ema": "sgl-bs", "nightjar-bandit": "nghtjar"}
TARGET_STATIONARY = 0.97
TARGET_NONSTATIONARY = 1.05
# decide + observe at batch 128: 0.5 % of a 40 ms decode step (the one step-cost model updates
# 8 + 3 max_gamma terms per step; the 4-term model it replaced took ~17 us)
TARGET_COST_US = 200.0
# The online controller's bars (on top of the targets above).
TARGET_NOISE_FREE = 0.99
TARGET_ORACLE = 0.95
REFERENCE = Path(vllm_hust_vspec.sim.__file__).parent / "data" / "online_v1_reference.json"
# The bars for per-request verify lengths.
PR_POLICIES = ("online", "online-per-request", "per-request-oracle",
               "vllm-adaptive-verification")
TARGET_PR_HETERO = 1.05  # x the batch-uniform online controller, heterogeneous scenarios
TARGET_PR_HOMO = 0.99  # x online, homogeneous scenarios
TARGET_PR_ORACLE = 0.90  # x the per-request oracle, every scenario


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


def controller_cost_us(batch: int = 128, steps: int = 20000, max_gamma: int = 5,
                       policy: str = "online", per_request: bool = False) -> tuple[float, float]:
    """Median and mean microseconds of one decide() + observe() pair of ``policy``'s
    controller (the bars read the median; the mean adds the occasional costly step);
    ``per_request``: wrapped by the per-request layer, with verify_lengths() each step over
    a batch of easy and hard requests (a fifth of them replaced every step)."""
    from vllm_hust_vspec.adaptive.feedback import VerifyQuery
    from vllm_hust_vspec.adaptive.verify_lengths import PerRequestController

    ctrl = build_controller(policy, min_gamma=0, max_gamma=max_gamma)
    if per_request:
        ctrl = PerRequestController(ctrl, 0, max_gamma)
    rng = random.Random(7)
    feedbacks = []
    ids = list(range(batch))
    next_id = batch
    for _ in range(512):
        g = rng.randint(0, max_gamma)
        for _ in range(batch // 5):
            ids[rng.randrange(batch)] = next_id
            next_id += 1
        acc = tuple(min(g, int(rng.expovariate(0.3 if rid % 2 else 2.0))) for rid in ids)
        feedbacks.append(StepFeedback(
            batch_size=batch, gamma=g, drafted=(g,) * batch, accepted=acc,
            committed=sum(acc) + batch, interval_s=0.01 + 0.002 * g + 2e-5 * batch * g,
            token_budget=8192, request_ids=tuple(ids) if per_request else None))
    samples: list[int] = []
    clock = time.perf_counter_ns
    for i in range(steps):
        fb = feedbacks[i % len(feedbacks)]
        t0 = clock()
        g = ctrl.decide(batch, 8192)
        if per_request and g > 0:
            ctrl.verify_lengths(VerifyQuery(fb.request_ids, (g,) * batch, 8192))
        ctrl.observe(fb)
        samples.append(clock() - t0)
    return statistics.median(samples) / 1e3, statistics.fmean(samples) / 1e3


# The profile the ``profile`` policy reads in --cost (a plausible host; only its cost matters).
_COST_PROFILE = {
    "schema_version": 1,
    "target": {"constant_s": 0.010, "per_batched_token_s": 2e-5, "per_context_token_s": 1e-9},
    "draft": {"constant_s": 0.0008, "per_batched_token_s": 2e-6, "per_context_token_s": 0.0},
    "per_gamma_overhead_s": 0.0001,
    "assumed_context_tokens": 1024,
    "default_acceptance": 0.7,
}


def _cost_feedbacks(batch: int, max_gamma: int, seed: int) -> dict[int, list[StepFeedback]]:
    """Pre-built feedback per verified gamma (16 variants each, random acceptance)."""
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


def step_costs_us(policy: str, batch: int, steps: int, max_gamma: int,
                  profile_path: str | None) -> list[float]:
    """Per-step decide + observe cost of ``policy``'s controller in microseconds, the first
    tenth (warm-up, sweep) left out."""
    ctrl = build_controller(policy, min_gamma=0, max_gamma=max_gamma, profile_path=profile_path)
    fbs = _cost_feedbacks(batch, max_gamma, seed=0)
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
    return costs[steps // 10:]


def cost_main(args: argparse.Namespace) -> int:
    """--cost: a table of median / p90 microseconds per step for each policy."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        path.write_text(json.dumps(Profile.from_dict(_COST_PROFILE).to_dict()))
        print(f"decide+observe cost per step, batch {args.batch}, max_gamma {args.max_gamma}, "
              f"{args.steps} steps, {sys.implementation.name} {sys.version.split()[0]}")
        print(f"{'policy':10s} {'median_us':>10s} {'p90_us':>8s}")
        for policy in ("online", "profile", "fixed"):
            costs = sorted(step_costs_us(policy, args.batch, args.steps, args.max_gamma,
                                         str(path)))
            print(f"{policy:10s} {statistics.median(costs):10.2f} "
                  f"{costs[int(0.9 * len(costs))]:8.2f}")
    return 0


def per_request_main(args: argparse.Namespace) -> int:
    """The per-request comparison: lengths vs batch-uniform, its oracle and vLLM's."""
    t_start = time.perf_counter()
    scenarios = [load_scenario(n) for n in (args.scenario or list_scenarios())]
    tasks = [(sc, p, s, False) for sc in scenarios for p in [*fixed_names(sc), *PR_POLICIES]
             for s in seeds_for(sc, args.seeds)]
    results = run_many(tasks, args.jobs)
    reports = []
    for sc in scenarios:
        mine = [r for (tsc, _, _, _), r in zip(tasks, results, strict=True) if tsc is sc]
        reports.append((sc, summarise(sc, mine)))
    print(f"per-request verify lengths: {len(scenarios)} scenarios x {args.seeds} seeds, "
          f"{len(tasks)} simulations in {time.perf_counter() - t_start:.1f} s")
    print("columns: goodput / best fixed gamma (online, per-req = online-per-request, "
          "pr-orc = per-request-oracle, v-av = vllm-adaptive-verification), then per-req over "
          "online, over pr-orc and over v-av (paired over seeds)")
    head = (f"{'scenario':28s} {'kind':6s} {'best':5s} {'online':>7s} {'per-req':>7s} "
            f"{'pr-orc':>7s} {'v-av':>7s} {'/online':>8s} {'/pr-orc':>8s} {'/v-av':>8s}")
    print(head)
    print("-" * len(head))
    rows = []
    for sc, rep in reports:
        pol = {p: rep.get(p) for p in PR_POLICIES}
        if any(v is None for v in pol.values()):
            continue
        mine = pol["online-per-request"]
        assert mine is not None
        rel = {p: paired_ratio(mine, pol[p]) for p in ("online", "per-request-oracle",  # type: ignore[arg-type]
                                                        "vllm-adaptive-verification")}
        hetero = "heterogeneous" in sc.tags
        rows.append((sc.name, hetero, rel))
        best = (rep.best_fixed_policy or "-").replace("fixed:", "K=")
        print(f"{sc.name:28s} {'hetero' if hetero else 'homo':6s} {best:5s} " + " ".join(
            _fmt(_ratio(rep, p, "ratio_to_best_fixed")) for p in PR_POLICIES) + "  " + " ".join(
            f"{_fmt(rel[p])} " for p in rel))
    us_batch, mean_batch = controller_cost_us()
    us_pr, mean_pr = controller_cost_us(per_request=True)
    print(f"\ndecide + verify_lengths + observe at batch 128: median {us_pr:.1f} us, mean "
          f"{mean_pr:.1f} us (the batch controller alone {us_batch:.1f} / {mean_batch:.1f} us)")
    ok_all = True

    def verdict(ok: bool, text: str) -> None:
        nonlocal ok_all
        ok_all &= ok
        print(f"[{'PASS' if ok else 'FAIL'}] {text}")

    print("\ntargets (online-per-request)")
    het = [(n, rel) for n, h, rel in rows if h]
    hom = [(n, rel) for n, h, rel in rows if not h]
    if het:
        verdict(all(rel["online"] >= TARGET_PR_HETERO for _, rel in het),
                f"per-request >= {TARGET_PR_HETERO} x online on every heterogeneous scenario ("
                + ", ".join(f"{n} {rel['online']:.3f}" for n, rel in het) + ")")
        verdict(all(rel["vllm-adaptive-verification"] >= 1.0 for _, rel in het),
                "per-request >= vllm-adaptive-verification on every heterogeneous scenario ("
                + ", ".join(f"{n} {rel['vllm-adaptive-verification']:.3f}" for n, rel in het)
                + ")")
    if hom:
        low = [(n, rel["online"]) for n, rel in hom if not rel["online"] >= TARGET_PR_HOMO]
        verdict(not low, f"per-request >= {TARGET_PR_HOMO} x online on every homogeneous "
                f"scenario (worst {min(rel['online'] for _, rel in hom):.3f})" + "".join(
                    f"; {n} {v:.3f}" for n, v in low))
    weak = [(n, rel["per-request-oracle"]) for n, _, rel in rows
            if not rel["per-request-oracle"] >= TARGET_PR_ORACLE]
    verdict(not weak, f"per-request >= {TARGET_PR_ORACLE} x the per-request oracle everywhere"
            + "".join(f"; {n} {v:.3f}" for n, v in weak))
    verdict(us_pr < TARGET_COST_US, f"decide + verify_lengths + observe median < "
            f"{TARGET_COST_US:g} us ({us_pr:.1f} us)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "reports": [rep.as_dict() for _, rep in reports],
            "per_request_over": {n: rel for n, _, rel in rows},
            "cost_us": us_pr, "all_pass": ok_all}, indent=2) + "\n", encoding="utf-8")
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f} s")
    return 0 if ok_all else 1


def main(argv: list[str] | None = None) -> int:
    """Run the suite and print the report."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--scenario", action="append", default=[],
                    help="limit to these shipped scenarios (repeatable)")
    ap.add_argument("--json", metavar="OUT.json", help="also write all summaries as JSON")
    ap.add_argument("--per-request", action="store_true",
                    help="compare per-request verify lengths (their bars) instead")
    ap.add_argument("--sampler-seeds", type=int, default=1, metavar="K",
                    help="also run the online controller with Thompson sampler seeds 1..K-1 "
                         "(online@N) and print how much of each ratio is the sampler's draw "
                         "(default 1: the host's seed 0 only; the targets are judged on it)")
    cost = ap.add_argument_group("controller cost only (--cost)")
    cost.add_argument("--cost", action="store_true",
                      help="only time decide + observe per step of each policy (no suite)")
    cost.add_argument("--batch", type=int, default=128, help="decode batch size (default 128)")
    cost.add_argument("--steps", type=int, default=20000, help="steps per policy (default 20000)")
    cost.add_argument("--max-gamma", type=int, default=4, help="largest gamma (default 4)")
    args = ap.parse_args(argv)
    if args.cost:
        return cost_main(args)
    if args.per_request:
        return per_request_main(args)

    t_start = time.perf_counter()
    scenarios = [load_scenario(n) for n in (args.scenario or list_scenarios())]
    samplers = [f"online@{n}" for n in range(1, max(args.sampler_seeds, 1))]
    tasks = [(sc, p, s, False) for sc in scenarios for p in [*all_policies(sc), *samplers]
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

    if samplers:
        print_sampler_spread(reports, ["online", *samplers])

    cost, mean_cost = controller_cost_us()
    print(f"\nonline controller decide+observe per step at batch 128: median {cost:.2f} us, "
          f"mean {mean_cost:.2f} us")
    ok = print_targets(reports, "online", cost, reference=_reference(args.seeds),
                       samplers=samplers)
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f} s")

    if args.json:
        Path(args.json).write_text(json.dumps({
            "reports": [r.as_dict() for r in reports],
            "controller_cost_us": cost,
            "all_pass": ok,
        }, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


def print_sampler_spread(reports: list[ScenarioReport], names: list[str]) -> None:
    """Per scenario, goodput / best fixed of the online controller with each Thompson sampler
    seed in ``names`` (the first is the host's): mean, range, and on a non-stationary scenario
    the best baseline's ratio. A gap to a baseline inside the range is the sampler's draw."""
    print(f"\nonline over {len(names)} Thompson sampler seeds: goodput / best fixed "
          "(seed 0 = the host's; best baseline on non-stationary scenarios)")
    print(f"{'scenario':28s} {'seed 0':>7s} {'mean':>7s} {'min':>7s} {'max':>7s}  baseline")
    for rep in reports:
        vals = [_ratio(rep, n, "ratio_to_best_fixed") for n in names]
        line = (f"{rep.scenario:28s} {vals[0]:7.4f} {statistics.fmean(vals):7.4f} "
                f"{min(vals):7.4f} {max(vals):7.4f}")
        if not rep.stationary:
            b = max(BASELINES, key=lambda p: _ratio(rep, p, "ratio_to_best_fixed"))
            line += f"  {SHORT.get(b, b)} {_ratio(rep, b, 'ratio_to_best_fixed'):.4f}"
        print(line)
    suite = [geomean([_ratio(r, n, "ratio_to_best_fixed") for r in reports]) for n in names]
    print(f"{'geomean (suite)':28s} {suite[0]:7.4f} {statistics.fmean(suite):7.4f} "
          f"{min(suite):7.4f} {max(suite):7.4f}")


def _reference(seeds: int) -> dict[str, float]:
    """The previous online controller's goodput / best fixed per scenario (12 seeds; {} when
    this run uses other seeds: the figures are only comparable at the same seeds)."""
    if seeds != 12 or not REFERENCE.is_file():
        return {}
    data = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return {str(k): float(v) for k, v in data["ratio_to_best_fixed"].items()}


def print_targets(reports: list[ScenarioReport], policy: str, cost_us: float, *,
                  reference: dict[str, float], samplers: list[str] | None = None) -> bool:
    """PASS/FAIL lines of ``policy``: the stationary and non-stationary targets, the controller's
    bars (noise-free stationary, oracle, each non-stationary scenario against each baseline),
    no scenario below ``reference`` (the previous controller, when given; read against the
    mean over ``samplers``, the same policy with other Thompson sampler seeds, when run: the
    previous controller drew nothing, so one sampler seed is one draw of the comparison) and
    the cost. Returns True when every printed target passes."""
    ok_all = True

    def verdict(ok: bool, text: str) -> None:
        nonlocal ok_all
        ok_all &= ok
        print(f"[{'PASS' if ok else 'FAIL'}] {text}")

    def r(rep: ScenarioReport, p: str = policy) -> float:
        return _ratio(rep, p, "ratio_to_best_fixed")

    print(f"\ntargets ({policy})")
    for label, noisy in (("", False), (" with timing noise (~)", True)):
        stat = [x for x in reports if x.stationary and x.noisy == noisy]
        if not stat:
            continue
        misses = [(x.scenario, r(x)) for x in stat if not r(x) >= TARGET_STATIONARY]
        worst = min(r(x) for x in stat)
        verdict(not misses, f"{policy} >= {TARGET_STATIONARY} x best fixed on every "
                f"stationary scenario{label} (worst {worst:.3f})" + "".join(
                    f"; {n} {v:.3f} (short by {TARGET_STATIONARY - v:.3f})" for n, v in misses))
        if not noisy:
            low = [(x.scenario, r(x)) for x in stat if not r(x) >= TARGET_NOISE_FREE]
            verdict(not low, f"{policy} >= {TARGET_NOISE_FREE} x best fixed on every "
                    f"noise-free stationary scenario" + "".join(
                        f"; {n} {v:.3f}" for n, v in low))
    nonst = [x for x in reports if not x.stationary]
    g_non = geomean([r(x) for x in nonst])
    per = ", ".join(f"{x.scenario} {r(x):.3f}" for x in nonst)
    verdict(g_non >= TARGET_NONSTATIONARY, f"{policy} >= {TARGET_NONSTATIONARY} x best fixed "
            f"on non-stationary (geomean {g_non:.3f}; {per})")
    below = [x.scenario for x in nonst if not r(x) >= TARGET_NONSTATIONARY]
    print(f"       per scenario: {len(nonst) - len(below)}/{len(nonst)} non-stationary scenarios"
          f" >= {TARGET_NONSTATIONARY}" + (f" (below: {', '.join(below)})" if below else ""))
    g_pol = geomean([r(x) for x in reports])
    beaten = []
    for b in BASELINES:
        gb = geomean([r(x, b) for x in reports])
        if not g_pol >= gb:
            beaten.append(f"{b} {gb:.3f}")
    verdict(not beaten, f"{policy} >= every published baseline on geomean ({policy} "
            f"{g_pol:.3f}" + (f"; beaten by {', '.join(beaten)}" if beaten else "") + ")")
    lost = [f"{x.scenario} by {b} ({r(x, b):.3f} vs {r(x):.3f})" for x in nonst
            for b in BASELINES if not r(x) >= r(x, b)]
    verdict(not lost, f"{policy} >= every published baseline on each non-stationary "
            "scenario" + (f"; beaten on {', '.join(lost)}" if lost else ""))
    weak = [(x.scenario, _ratio(x, policy, "ratio_to_oracle")) for x in reports
            if not _ratio(x, policy, "ratio_to_oracle") >= TARGET_ORACLE]
    verdict(not weak, f"{policy} >= {TARGET_ORACLE} x the oracle on every scenario" +
            "".join(f"; {n} {v:.3f}" for n, v in weak))
    if reference:
        def drawn(rep: ScenarioReport) -> float:
            return statistics.fmean(r(rep, p) for p in [policy, *(samplers or [])])

        known = [x for x in reports if x.scenario in reference]
        worse = [f"{x.scenario} {drawn(x):.4f} < {reference[x.scenario]:.4f}" for x in known
                 if not drawn(x) >= reference[x.scenario]]
        over = f" (mean over {1 + len(samplers)} sampler seeds)" if samplers else ""
        verdict(not worse, f"{policy} >= the previous online controller on every scenario"
                + over + (f" ({len(worse)} below: {', '.join(worse)})" if worse else ""))
        g_ref = geomean([reference[x.scenario] for x in known])
        g_now = geomean([r(x) for x in known])
        verdict(g_now >= g_ref, f"{policy} >= the previous online controller on the suite "
                f"geomean ({g_now:.3f} vs {g_ref:.3f})")
    else:
        print("       (no comparison with the previous online controller: it was measured at "
              "12 seeds, run --seeds 12)")
    verdict(cost_us < TARGET_COST_US, f"{policy} decide+observe median < {TARGET_COST_US:g} us "
            f"({cost_us:.2f} us)")
    return ok_all


if __name__ == "__main__":
    sys.exit(main())
