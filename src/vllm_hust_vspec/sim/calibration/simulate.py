"""Simulating one measured NPU configuration, recording what the calibration fits.

A configuration (:class:`~.measurements.MeasuredConfig`) becomes a scenario with the run's exact
workload (its per-request prompt and output lengths, all 200 queued at once, at most 128
running: the offline benchmark), its host (refill, token budget, graph capture sizes, the
adaptive runtime's native gamma) and the candidate acceptance and cost. One simulation yields:

* the step features of the host cost model summed over the run (its elapsed time is their
  weighted sum) and over each (bucket, gamma) window 0.14.3's controller averaged
  (its last 32 steady steps: no prefill, verified width = scheduled width, first one skipped);
* the acceptance figures 0.14.3's summaries report (steps, second-draft transitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...adaptive.feedback import Controller, ControllerSnapshot, SettledPolicy, StepFeedback
from ..baselines.pred_ucb import batch_bucket
from ..engine import simulate
from ..host_cost import HOST_COST_TERMS, HostCost
from ..policies import make_controller
from ..scenario import Scenario, parse_scenario
from .measurements import MeasuredConfig, Measurements

WINDOW = 32  # 0.14.3's reward window (steady steps per arm)


@dataclass(frozen=True, slots=True)
class AcceptParams:
    """Per-position conditional acceptance and the per-request Beta concentration."""

    conditional: tuple[float, ...]
    concentration: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The scenario ``acceptance`` object."""
        out: dict[str, Any] = {"type": "positional", "conditional": True,
                               "rates": [round(c, 4) for c in self.conditional]}
        if self.concentration is not None:
            out["beta_concentration"] = round(self.concentration, 3)
        return out


class BucketSchedule(SettledPolicy):
    """The gammas a run played per batch bucket (its log), as a fixed per-bucket policy."""

    def __init__(self, table: tuple[tuple[int, int], ...]) -> None:
        self.table = dict(table)
        self.gamma = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The recorded gamma of the batch's bucket (the largest bucket's above it)."""
        key = batch_bucket(batch_size)
        self.gamma = self.table.get(key, self.table[max(self.table)])
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Ignored: the schedule is fixed."""

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "bucket-schedule", "gamma": self.gamma}


class _Transitions:
    """Wraps a controller and counts 0.14.3's second-draft transitions."""

    def __init__(self, inner: Controller) -> None:
        self.inner = inner
        self.last: dict[Any, bool] = {}
        self.counts = [[0, 0], [0, 0]]

    def decide(self, batch_size: int, token_budget: int) -> int:
        return self.inner.decide(batch_size, token_budget)

    def observe(self, feedback: StepFeedback) -> None:
        ids = feedback.request_ids or ()
        for rid, d, a in zip(ids, feedback.drafted, feedback.accepted, strict=False):
            if d < 2:
                continue
            now = a >= 2
            prev = self.last.get(rid)
            if prev is not None:
                self.counts[int(prev)][int(now)] += 1
            self.last[rid] = now
        self.inner.observe(feedback)

    def settled(self) -> bool:
        return self.inner.settled()

    def report(self) -> ControllerSnapshot:
        return self.inner.report()

    def snapshot(self) -> dict[str, Any]:
        return self.inner.snapshot()


@dataclass(slots=True)
class _Recorder:
    """A cost model that records each step's call and features, then prices it."""

    cost: HostCost
    calls: list[tuple[int, int, int, int, tuple[float, ...]]] = field(default_factory=list)

    def step_time(self, num_decode: int, verify_tokens: int, gamma_draft: int,
                  num_drafting: int, prefill_tokens: int, context_tokens: int, *,
                  zero_pass: bool = False) -> float:
        feats = self.cost.features(num_decode, verify_tokens, gamma_draft, num_drafting,
                                   prefill_tokens, zero_pass=zero_pass)
        self.calls.append((num_decode, verify_tokens, gamma_draft, prefill_tokens, feats))
        return self.cost.step_time(num_decode, verify_tokens, gamma_draft, num_drafting,
                                   prefill_tokens, context_tokens, zero_pass=zero_pass)

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        return self.cost.steady_time(batch, gamma, context_tokens)


@dataclass(frozen=True, slots=True)
class Window:
    """One (bucket, gamma) reward window: summed features, tokens and its step count."""

    features: tuple[float, ...]
    tokens: float
    steps: int


@dataclass(frozen=True, slots=True)
class ConfigRun:
    """What one simulation of a configuration gives the calibration."""

    steps: int
    committed: int
    sim_seconds: float
    features: tuple[float, ...]
    windows: dict[tuple[int, int], Window]
    transitions: tuple[tuple[int, int], tuple[int, int]]
    controller_state: dict[str, Any]

    @property
    def throughput(self) -> float:
        """Simulated output tokens per second (makespan, as the benchmark timed it)."""
        return self.committed / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @property
    def p_second(self) -> float:
        """Simulated P(second draft accepted), counted like 0.14.3."""
        (rr, ra), (ar, aa) = self.transitions
        total = rr + ra + ar + aa
        return (ra + aa) / total if total else 0.0


def config_gammas(cfg: MeasuredConfig, max_gamma: int) -> tuple[int, int]:
    """The scenario's gamma range for a configuration (a fixed K: 0..K)."""
    if cfg.policy.startswith("fixed:"):
        return 0, int(cfg.policy.split(":")[1])
    return cfg.min_gamma, cfg.max_gamma or max_gamma


def host_cost_for(cfg: MeasuredConfig, coefficients: dict[str, float],
                  native: tuple[int, ...]) -> HostCost:
    """The host cost of ``cfg``'s host with the given coefficients (missing: 0)."""
    return HostCost(capture_sizes=cfg.capture_sizes,
                    native_gammas=native if cfg.host == "adaptive" else (),
                    **{name: coefficients.get(name, 0.0) for name in HOST_COST_TERMS})


def config_scenario(cfg: MeasuredConfig, data: Measurements, accept: AcceptParams,
                    cost: HostCost, *, name: str | None = None, seed: int = 1) -> Scenario:
    """The scenario of one measured configuration (module docstring)."""
    lo, hi = config_gammas(cfg, len(accept.conditional))
    doc: dict[str, Any] = {
        "schema_version": 1,
        "name": name or f"npu-{cfg.name}",
        "seed": seed,
        "tags": ["stationary", "calibrated"],
        "min_gamma": lo,
        "max_gamma": hi,
        "max_num_seqs": 128,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "refill_batch": cfg.refill,
        "refill_max_hold_steps": 0,  # 0.14.3's runtime held until the cohort fit
        "refill_hold": "speculating",
        "startup_calibration": None,
        "workload": {
            "num_requests": len(cfg.output_lengths),
            "arrival": {"type": "closed", "concurrency": len(cfg.output_lengths)},
            "prompt_len": {"type": "list", "values": list(data.prompt_lengths)},
            "output_len": {"type": "list", "values": list(cfg.output_lengths)},
        },
        "acceptance": accept.to_json(),
        "cost": cost.to_json(),
    }
    return parse_scenario(doc, f"configuration {cfg.name}")


def config_controller(cfg: MeasuredConfig, scenario: Scenario, *,
                      recorded: bool = False) -> Controller:
    """The configuration's policy (``recorded``: the per-bucket gammas its log shows)."""
    if recorded and cfg.schedule:
        return BucketSchedule(cfg.schedule)
    return make_controller(cfg.policy, scenario)


def simulate_config(cfg: MeasuredConfig, scenario: Scenario, seed: int, *,
                    recorded: bool = False) -> ConfigRun:
    """Simulate ``cfg`` on ``scenario`` (a :class:`HostCost` scenario) and record it."""
    assert isinstance(scenario.cost, HostCost)
    recorder = _Recorder(scenario.cost)
    wrapped = _Transitions(config_controller(cfg, scenario, recorded=recorded))
    run = simulate(scenario, wrapped, seed, trace=True, cost=recorder)
    n = len(HOST_COST_TERMS)
    total = [0.0] * n
    for call in recorder.calls:
        for i, f in enumerate(call[4]):
            total[i] += f
    sums: dict[tuple[int, int], list[tuple[tuple[float, ...], float]]] = {}
    decode_calls = (c for c in recorder.calls if c[0] > 0)
    skipped_first = False
    for call, rec in zip(decode_calls, run.trace, strict=True):
        nd, verify, g, pre, feats = call
        if pre or g <= 0 or verify != nd * g:
            continue
        if not skipped_first:
            skipped_first = True
            continue
        sums.setdefault((batch_bucket(nd), g), []).append((feats, float(rec["committed"])))
    windows: dict[tuple[int, int], Window] = {}
    for key, items in sums.items():
        last = items[-WINDOW:]
        feats_sum = tuple(sum(f[i] for f, _ in last) for i in range(n))
        windows[key] = Window(feats_sum, sum(t for _, t in last), len(items))
    c = wrapped.counts
    return ConfigRun(steps=run.steps, committed=run.committed_tokens,
                     sim_seconds=run.sim_seconds, features=tuple(total), windows=windows,
                     transitions=((c[0][0], c[0][1]), (c[1][0], c[1][1])),
                     controller_state=run.controller_state)
