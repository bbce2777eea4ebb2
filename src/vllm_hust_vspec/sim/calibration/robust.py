"""Robustness of gamma controllers over the calibration family (``vllm-hust-vspec-sim robust``).

Every scenario of :mod:`.family` runs every fixed gamma ``min..max``, the oracle
(:class:`~vllm_hust_vspec.sim.oracle.Oracle`: greedy expected goodput with the true
acceptance, an upper reference rather than a bound) and each policy under test, all on the same
seeds (common random numbers). A policy's ratio is its mean goodput over the better of the best
fixed gamma in hindsight and the oracle (means over the seeds), so 1.0 is "as good as the best
reference this scenario has" and a policy can exceed it. Runs go to a pool of worker
processes, longest first.
"""

from __future__ import annotations

import copy
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..policies import fixed_names
from ..runner import run_one
from ..scenario import Scenario
from .family import Member

BAR = 0.97  # the ratio the report counts scenarios below
QUICK_REQUESTS = 48  # --quick: the first this many requests of each workload

# (scenario index, scenario, policy, seed)
Task = tuple[int, Scenario, str, int]
# (scenario index, policy, seed, goodput, mean gamma)
Outcome = tuple[int, str, int, float, float]


@dataclass(slots=True)
class PolicyResult:
    """One policy on one scenario: mean goodput (tok/s), mean gamma and per-seed goodput."""

    policy: str
    tok_s: float
    mean_gamma: float
    per_seed: list[float]
    ratio: float = float("nan")  # policies under test: over the scenario's reference


@dataclass(slots=True)
class ScenarioResult:
    """Every fixed gamma, the oracle and the policies under test on one scenario."""

    name: str
    kind: str
    fixed: dict[int, PolicyResult]
    oracle: PolicyResult
    policies: list[PolicyResult]
    cost: dict[str, Any] = field(default_factory=dict)
    max_num_seqs: int = 0

    @property
    def best_fixed(self) -> tuple[int, PolicyResult]:
        """The best fixed gamma in hindsight and its result (ties: the smaller gamma)."""
        g = max(self.fixed, key=lambda k: (self.fixed[k].tok_s, -k))
        return g, self.fixed[g]

    @property
    def reference(self) -> float:
        """max(best fixed, oracle) in tok/s."""
        return max(self.best_fixed[1].tok_s, self.oracle.tok_s)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view."""
        g, best = self.best_fixed
        return {
            "scenario": self.name, "kind": self.kind, "max_num_seqs": self.max_num_seqs,
            "cost": self.cost,
            "fixed": {str(k): _result_dict(v) for k, v in sorted(self.fixed.items())},
            "best_fixed": {"gamma": g, "tok_s": best.tok_s},
            "oracle": _result_dict(self.oracle),
            "reference_tok_s": self.reference,
            "policies": {p.policy: {**_result_dict(p), "ratio": p.ratio}
                         for p in self.policies},
        }


def _result_dict(r: PolicyResult) -> dict[str, Any]:
    return {"tok_s": r.tok_s, "mean_gamma": r.mean_gamma, "tok_s_per_seed": r.per_seed}


@dataclass(slots=True)
class RobustReport:
    """Every scenario's results, the settings and how long the runs took."""

    scenarios: list[ScenarioResult]
    policies: list[str]
    seeds: list[int]
    jobs: int
    elapsed_s: float
    quick: bool = False

    def worst(self, policy: str) -> tuple[float, str]:
        """The policy's lowest ratio and its scenario."""
        pairs = [(p.ratio, s.name) for s in self.scenarios for p in s.policies
                 if p.policy == policy]
        return min(pairs) if pairs else (float("nan"), "")

    def below(self, policy: str, bar: float = BAR) -> list[str]:
        """Scenarios where the policy's ratio is below ``bar``."""
        return [s.name for s in self.scenarios for p in s.policies
                if p.policy == policy and p.ratio < bar]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view: settings, every scenario, and per policy the worst ratio and the
        scenarios below :data:`BAR`."""
        return {
            "policies": self.policies, "seeds": self.seeds, "jobs": self.jobs,
            "quick": self.quick, "elapsed_s": round(self.elapsed_s, 2), "bar": BAR,
            "scenarios": [s.as_dict() for s in self.scenarios],
            "summary": {p: {"worst_ratio": self.worst(p)[0], "worst_scenario": self.worst(p)[1],
                            "below_bar": self.below(p)} for p in self.policies},
        }


def quick_doc(doc: dict[str, Any], requests: int = QUICK_REQUESTS) -> dict[str, Any]:
    """``doc`` with its workload cut to the first ``requests`` requests (a fast check)."""
    out = copy.deepcopy(doc)
    w = out["workload"]
    n = min(int(w["num_requests"]), requests)
    w["num_requests"] = n
    if w["arrival"].get("type") == "closed":
        w["arrival"]["concurrency"] = min(int(w["arrival"]["concurrency"]), n)
    return out


def _weight(sc: Scenario) -> float:
    """Rough run length (steps at gamma 0): output tokens over the batch."""
    w = sc.workload
    return w.num_requests * w.output_len.mean_hint / max(1, min(sc.max_num_seqs,
                                                                 w.num_requests))


def _run(task: Task) -> Outcome:
    index, sc, policy, seed = task
    r = run_one(sc, policy, seed)
    return index, policy, seed, r.goodput, r.mean_gamma


def _summary(policy: str, runs: list[tuple[int, float, float]]) -> PolicyResult:
    runs.sort()
    return PolicyResult(policy, statistics.fmean(g for _, g, _ in runs),
                        statistics.fmean(m for _, _, m in runs), [g for _, g, _ in runs])


def run_robust(members: Sequence[Member], policies: Sequence[str], seeds: Sequence[int], *,
               jobs: int = 2, progress: Callable[[str], None] | None = None) -> RobustReport:
    """Run every fixed gamma, the oracle and ``policies`` on every member over ``seeds``
    (module docstring); ``progress`` gets one line per finished scenario."""
    start = time.monotonic()
    scenarios = [m.scenario() for m in members]
    names = list(dict.fromkeys(policies))
    tasks: list[Task] = [(i, sc, p, s) for i, sc in enumerate(scenarios)
                         for p in [*fixed_names(sc), "oracle", *names] for s in seeds]
    tasks.sort(key=lambda t: -_weight(t[1]))  # longest first keeps every worker busy
    left = [0] * len(scenarios)
    for t in tasks:
        left[t[0]] += 1
    got: list[dict[str, list[tuple[int, float, float]]]] = [{} for _ in scenarios]
    done = 0

    def collect(out: Outcome) -> None:
        nonlocal done
        i, policy, seed, goodput, gamma = out
        got[i].setdefault(policy, []).append((seed, goodput, gamma))
        left[i] -= 1
        done += 1
        if progress is not None and left[i] == 0:
            progress(f"{sum(1 for n in left if n == 0)}/{len(scenarios)} scenarios "
                     f"({scenarios[i].name}), {done}/{len(tasks)} runs, "
                     f"{time.monotonic() - start:.0f} s")

    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            collect(_run(task))
    else:
        with multiprocessing.Pool(processes=jobs) as pool:
            for out in pool.imap_unordered(_run, tasks, chunksize=1):
                collect(out)
    results: list[ScenarioResult] = []
    for i, (m, sc) in enumerate(zip(members, scenarios, strict=True)):
        fixed = {int(p.split(":")[1]): _summary(p, runs) for p, runs in got[i].items()
                 if p.startswith("fixed:")}
        res = ScenarioResult(m.name, m.kind, fixed, _summary("oracle", got[i]["oracle"]),
                             [_summary(p, got[i][p]) for p in names],
                             cost=dict(m.doc.get("cost", {})), max_num_seqs=sc.max_num_seqs)
        ref = res.reference
        for p in res.policies:
            p.ratio = p.tok_s / ref if ref > 0 else float("nan")
        results.append(res)
    return RobustReport(results, names, list(seeds), jobs, time.monotonic() - start)


def format_report(report: RobustReport, bar: float = BAR) -> str:
    """The table: scenario, best fixed (gamma, tok/s), oracle tok/s, then per policy its
    tok/s, ratio to max(best fixed, oracle) and mean gamma; then the worst ratio and the count
    below ``bar`` per policy."""
    width = max([len("scenario"), *(len(s.name) for s in report.scenarios)])
    head = f"{'scenario':{width}s} {'best fixed':>13s} {'oracle':>8s}"
    for p in report.policies:
        head += f" | {p[:14]:>14s} {'ratio':>6s} {'gamma':>5s}"
    lines = [head, "-" * len(head)]
    for s in report.scenarios:
        g, best = s.best_fixed
        row = f"{s.name:{width}s} {f'g{g} {best.tok_s:.1f}':>13s} {s.oracle.tok_s:8.1f}"
        for r in s.policies:
            flag = "*" if r.ratio < bar else " "
            row += f" | {r.tok_s:14.1f} {r.ratio:6.3f}{flag}{r.mean_gamma:5.2f}"
        lines.append(row)
    lines.append("")
    lines.append(f"ratio: policy tok/s over max(best fixed, oracle) tok/s, means over seeds "
                 f"{report.seeds}; * below {bar}")
    n = len(report.scenarios)
    for p in report.policies:
        worst, where = report.worst(p)
        lines.append(f"{p}: worst ratio {worst:.3f} ({where}); {len(report.below(p, bar))} of "
                     f"{n} scenarios below {bar}")
    runs = sum(len(s.fixed) + 1 + len(s.policies) for s in report.scenarios) * len(report.seeds)
    lines.append(f"{runs} runs in {report.elapsed_s:.1f} s on {report.jobs} worker(s)"
                 + (" (quick)" if report.quick else ""))
    return "\n".join(lines)


__all__ = ["BAR", "PolicyResult", "RobustReport", "ScenarioResult", "format_report",
           "quick_doc", "run_robust"]
