"""Run policies over seeds and summarise: mean, spread, ratios to best fixed and oracle.

Common random numbers: every policy runs with the same seeds, and the engine keys all random
draws on (seed, request), so ratios between policies are measured on identical workloads.
"""

from __future__ import annotations

import math
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from .engine import RunResult, simulate
from .policies import fixed_names, make_controller
from .scenario import Scenario


@dataclass(slots=True)
class PolicySummary:
    """One policy over all seeds of a scenario."""

    policy: str
    goodput_mean: float
    goodput_std: float
    committed_tokens: float
    sim_seconds: float
    busy_seconds: float
    mean_gamma: float
    acceptance_rate: float
    mean_tpot_ms: float
    ratio_to_best_fixed: float = math.nan
    ratio_to_oracle: float = math.nan
    runs: list[RunResult] = field(default_factory=list)
    # TPOT-SLO workloads: share of requests whose mean TPOT met their SLO, over all runs,
    # overall and per class (nan / empty without SLO classes)
    slo_attainment: float = math.nan
    slo_by_class: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready view (without the per-run timelines)."""
        return {
            "policy": self.policy,
            "goodput_tokens_per_s": self.goodput_mean,
            "goodput_std": self.goodput_std,
            "committed_tokens": self.committed_tokens,
            "sim_seconds": self.sim_seconds,
            "busy_seconds": self.busy_seconds,
            "mean_gamma": self.mean_gamma,
            "acceptance_rate": self.acceptance_rate,
            "mean_tpot_ms": self.mean_tpot_ms,
            "ratio_to_best_fixed": _finite(self.ratio_to_best_fixed),
            "ratio_to_oracle": _finite(self.ratio_to_oracle),
            "slo_attainment": _finite(self.slo_attainment),
            "slo_attainment_by_class": dict(self.slo_by_class),
            "seeds": [r.seed for r in self.runs],
            "goodput_per_seed": [r.goodput for r in self.runs],
        }


@dataclass(slots=True)
class ScenarioReport:
    """All policies of one scenario."""

    scenario: str
    stationary: bool
    seeds: list[int]
    best_fixed_policy: str | None
    policies: list[PolicySummary]
    noisy: bool = False  # step times carry timing noise (scenario ``timing_noise``)

    def get(self, policy: str) -> PolicySummary | None:
        """Summary of ``policy`` if it ran."""
        for p in self.policies:
            if p.policy == policy:
                return p
        return None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready view."""
        return {
            "scenario": self.scenario,
            "stationary": self.stationary,
            "noisy": self.noisy,
            "seeds": self.seeds,
            "best_fixed_policy": self.best_fixed_policy,
            "policies": [p.as_dict() for p in self.policies],
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def run_one(scenario: Scenario, policy: str, seed: int, record: bool = False) -> RunResult:
    """One run with a fresh controller."""
    return simulate(scenario, make_controller(policy, scenario, seed), seed, policy=policy,
                    record=record)


def _task(args: tuple[Scenario, str, int, bool]) -> RunResult:
    return run_one(*args)


def seeds_for(scenario: Scenario, n: int) -> list[int]:
    """The ``n`` seeds used for a scenario: its base seed and the following integers."""
    return [scenario.seed + i for i in range(n)]


def run_many(tasks: list[tuple[Scenario, str, int, bool]], jobs: int = 1) -> list[RunResult]:
    """Run (scenario, policy, seed, record) tasks, in worker processes when ``jobs > 1``."""
    if jobs <= 1 or len(tasks) <= 1:
        return [_task(t) for t in tasks]
    # Longest first keeps both workers busy until the end.
    order = sorted(range(len(tasks)), key=lambda i: -_weight(tasks[i][0]))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(_task, [tasks[i] for i in order], chunksize=1))
    out: list[RunResult | None] = [None] * len(tasks)
    for i, res in zip(order, done, strict=True):
        out[i] = res
    return [r for r in out if r is not None]


def _weight(sc: Scenario) -> float:
    w = sc.workload
    return w.num_requests * w.output_len.mean_hint


def summarise(scenario: Scenario, results: list[RunResult]) -> ScenarioReport:
    """Group runs by policy, find the best fixed gamma in hindsight, compute ratios."""
    by_policy: dict[str, list[RunResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    summaries: list[PolicySummary] = []
    for name, runs in by_policy.items():
        runs.sort(key=lambda r: r.seed)
        gp = [r.goodput for r in runs]
        slo = _slo_attainment(runs)
        summaries.append(PolicySummary(
            policy=name,
            goodput_mean=statistics.fmean(gp),
            goodput_std=statistics.stdev(gp) if len(gp) > 1 else 0.0,
            committed_tokens=statistics.fmean(r.committed_tokens for r in runs),
            sim_seconds=statistics.fmean(r.sim_seconds for r in runs),
            busy_seconds=statistics.fmean(r.busy_seconds for r in runs),
            mean_gamma=statistics.fmean(r.mean_gamma for r in runs),
            acceptance_rate=statistics.fmean(r.acceptance_rate for r in runs),
            mean_tpot_ms=statistics.fmean(r.mean_tpot_ms for r in runs),
            runs=runs,
            slo_attainment=slo[0],
            slo_by_class=slo[1],
        ))
    fixed = [s for s in summaries if s.policy.startswith("fixed:")]
    best = max(fixed, key=lambda s: s.goodput_mean) if fixed else None
    oracle = next((s for s in summaries if s.policy == "oracle"), None)
    for s in summaries:
        if best is not None:
            s.ratio_to_best_fixed = paired_ratio(s, best)
        if oracle is not None:
            s.ratio_to_oracle = paired_ratio(s, oracle)
    seeds = sorted({r.seed for r in results})
    return ScenarioReport(
        scenario=scenario.name,
        stationary=scenario.stationary,
        seeds=seeds,
        best_fixed_policy=best.policy if best else None,
        policies=summaries,
        noisy=scenario.timing_noise.active,
    )


def _slo_attainment(runs: list[RunResult]) -> tuple[float, dict[str, float]]:
    """Pooled SLO attainment of ``runs``, overall and per class (every request of every seed
    counts once)."""
    total: dict[str, int] = {}
    met: dict[str, int] = {}
    for r in runs:
        for c, n in r.slo_total.items():
            total[c] = total.get(c, 0) + n
            met[c] = met.get(c, 0) + r.slo_met.get(c, 0)
    if not total:
        return math.nan, {}
    return (sum(met.values()) / sum(total.values()),
            {c: met[c] / total[c] for c in sorted(total)})


def paired_ratio(a: PolicySummary, b: PolicySummary) -> float:
    """Mean over seeds of goodput(a, seed) / goodput(b, seed) (pairs share random numbers)."""
    ref = {r.seed: r.goodput for r in b.runs}
    ratios = [r.goodput / ref[r.seed] for r in a.runs if ref.get(r.seed)]
    return statistics.fmean(ratios) if ratios else math.nan


def evaluate(scenario: Scenario, policies: list[str], num_seeds: int, *, jobs: int = 1,
             record: bool = False) -> ScenarioReport:
    """Run ``policies`` over ``num_seeds`` seeds; fixed:K are added (not reported twice) so
    the best fixed gamma in hindsight is always known."""
    names = list(dict.fromkeys(policies))
    extra = [f for f in fixed_names(scenario) if f not in names]
    seeds = seeds_for(scenario, num_seeds)
    tasks = [(scenario, p, s, record and p in names and s == seeds[0])
             for p in names + extra for s in seeds]
    report = summarise(scenario, run_many(tasks, jobs))
    report.policies = [p for p in report.policies if p.policy in names]
    report.policies.sort(key=lambda p: names.index(p.policy))
    return report


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values (nan when empty)."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
