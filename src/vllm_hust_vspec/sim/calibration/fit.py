"""Calibrating the NPU scenarios from 0.14.3's measured runs (docs/simulator.md).

Two fits, both repeatable (fixed seeds, deterministic search):

1. **Acceptance** per method (draft model, EAGLE): per-position conditional rates and a
   per-request Beta concentration, by a coordinate search that matches the runs' controller
   summaries: their step counts (one decision per engine step) and the second-draft
   transition counts (P(second accepted), and after an accepted / rejected one). The online
   run is simulated with the per-bucket gammas its log shows, so the fit does not depend on
   step costs.
2. **Step cost** (:class:`~vllm_hust_vspec.sim.host_cost.HostCost`), one non-negative least-squares
   fit over every configuration of both methods: the target's terms and the admission cost are
   shared (one target model, one host), the drafter terms are per method. Each configuration
   contributes its elapsed time (the sum of its simulated steps' features) and, for the adaptive
   runs, each (bucket, gamma) reward its controller logged (the features of the simulated window vs
   the tokens of that window / the logged reward). Residuals are relative.

``prefill_per_token_ms`` and ``draft_ingest_per_token_ms`` are not fitted (the data cannot
separate them from ``admission_ms`` and ``target_per_token_ms``); they are inputs (default 0),
and ``vllm-hust-vspec-sim explain-npu --sensitivity`` shows how predictions move with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from ...adaptive.nnls import nnls
from ..host_cost import HOST_COST_TERMS, HostCost
from .measurements import MeasuredConfig, Measurements
from .simulate import AcceptParams, ConfigRun, config_scenario, host_cost_for, simulate_config

METHODS = ("draft", "eagle")
DEPTH = {"draft": 4, "eagle": 3}
# Fitted columns: the target's terms and the admission cost are shared by the target-only and
# draft-model configurations; each method adds its drafter's terms. EAGLE has its own admission
# cost (its admission steps cost far less than a draft model's: docs/simulator.md). A method's
# coefficient of a term is the sum of the columns it reads for that term.
SHARED_TERMS = ("target_base_ms", "target_per_request_ms", "target_per_token_ms",
                "admission_ms")
DRAFTER_TERMS = {
    "draft": ("spec_overhead_ms", "draft_pass_ms", "draft_pass_per_request_ms",
              "offpath_pass_ms"),
    "eagle": ("spec_overhead_ms", "draft_pass_ms", "draft_pass_per_request_ms",
              "admission_ms"),
}
# Shared terms a method does not read (it has its own column instead).
OWN_TERMS = {"eagle": ("admission_ms",)}
PRIOR_WEIGHT = 0.5
FIT_SEEDS = (1, 2, 3)
PREDICT_SEEDS = (1, 2, 3, 4)
REWARD_WEIGHT = 0.25  # a full (32-step) reward window vs one elapsed time
_UNIT = {"target_base_ms": 30.0, "target_per_request_ms": 0.1, "target_per_token_ms": 0.03,
         "admission_ms": 200.0, "prefill_per_token_ms": 0.05,
         "spec_overhead_ms": 20.0, "draft_pass_ms": 3.0, "draft_pass_per_request_ms": 0.15,
         "offpath_pass_ms": 100.0}


@dataclass(frozen=True, slots=True)
class FitOptions:
    """What the calibration assumes where the data is silent (docs/simulator.md)."""

    prefill_per_token_ms: float = 0.0
    draft_ingest_per_token_ms: float = 0.0
    shared_terms: tuple[str, ...] = SHARED_TERMS
    drafter_terms: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: dict(DRAFTER_TERMS))
    own_terms: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(OWN_TERMS))
    # method -> (term, other method): the method reads the other method's column of the term
    # (e.g. target-only priced with EAGLE's admission cost, a sensitivity case)
    borrowed: dict[str, tuple[str, str]] = field(default_factory=dict)
    reward_weight: float = REWARD_WEIGHT
    prior_weight: float = PRIOR_WEIGHT
    fit_seeds: tuple[int, ...] = FIT_SEEDS
    predict_seeds: tuple[int, ...] = PREDICT_SEEDS


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted acceptance per method and step-cost coefficients per method ("target": the
    shared target terms alone, what a target-only run pays)."""

    accept: dict[str, AcceptParams]
    coefficients: dict[str, dict[str, float]]
    left_out: str | None = None
    options: FitOptions = field(default_factory=FitOptions)

    def cost(self, cfg: MeasuredConfig, data: Measurements) -> HostCost:
        """The host cost of ``cfg`` (``coefficients`` has "draft", "eagle" and "target")."""
        native = data.native_gammas.get(cfg.method, ())
        return host_cost_for(cfg, self.coefficients[cfg.method], native)

    def accept_for(self, cfg: MeasuredConfig) -> AcceptParams:
        """Acceptance of ``cfg``'s drafter (target-only: any, it never drafts)."""
        return self.accept[cfg.method if cfg.method in METHODS else "draft"]


# -- acceptance -------------------------------------------------------------------------------
def acceptance_inputs(data: Measurements, method: str, leave_out: str | None) -> list[str]:
    """Names of the configurations whose summaries the acceptance fit of ``method`` reads."""
    return [c.name for c in data.configs
            if c.method == method and c.accept is not None and c.name != leave_out]


def _accept_loss(params: AcceptParams, cfgs: Sequence[MeasuredConfig], data: Measurements,
                 seeds: Iterable[int]) -> float:
    unit = {name: 1.0 for name in HOST_COST_TERMS}
    loss = 0.0
    for cfg in cfgs:
        stats = cfg.accept
        assert stats is not None
        sc = config_scenario(cfg, data, params, host_cost_for(cfg, unit, ()))
        runs = [simulate_config(cfg, sc, s, recorded=True) for s in seeds]
        steps = sum(r.steps for r in runs) / len(runs)
        loss += ((steps - stats.steps) / (0.015 * stats.steps)) ** 2
        counts = [[sum(r.transitions[i][j] for r in runs) for j in (0, 1)] for i in (0, 1)]
        total = sum(map(sum, counts))
        pairs = (
            (stats.p_second, (counts[0][1] + counts[1][1]) / total if total else 0.0, 0.02),
            (stats.after_accept, counts[1][1] / max(1, sum(counts[1])), 0.03),
            (stats.after_reject, counts[0][1] / max(1, sum(counts[0])), 0.03),
        )
        for measured, simulated, scale in pairs:
            if measured is not None:
                loss += ((simulated - measured) / scale) ** 2
    return loss


_ACCEPT_CACHE: dict[tuple[object, ...], AcceptParams] = {}


def fit_acceptance(data: Measurements, method: str, leave_out: str | None = None,
                   seeds: tuple[int, ...] = FIT_SEEDS) -> AcceptParams:
    """Coordinate search over the conditional rates and log-concentration (module doc);
    cached per input set, so leaving out a run without a summary reuses the full fit."""
    names = acceptance_inputs(data, method, leave_out)
    key = (tuple(sorted(data.sources.items())), method, tuple(names), seeds,
           tuple((n, data.get(n).accept) for n in names))
    if key not in _ACCEPT_CACHE:
        _ACCEPT_CACHE[key] = _search_acceptance(data, method, names, seeds)
    return _ACCEPT_CACHE[key]


def _search_acceptance(data: Measurements, method: str, names: list[str],
                       seeds: tuple[int, ...]) -> AcceptParams:
    cfgs = [data.get(n) for n in names]
    depth = DEPTH[method]
    if not cfgs:
        raise ValueError(f"no {method} run with a controller summary to fit acceptance on")
    x = [0.85] * depth + [math.log(10.0)]
    step = [0.04] * depth + [0.4]
    lo = [0.3] * depth + [math.log(3.0)]
    hi = [0.995] * depth + [math.log(400.0)]

    def params(v: list[float]) -> AcceptParams:
        return AcceptParams(tuple(v[:depth]), math.exp(v[depth]))

    # moves: each coordinate up/down, and each pair of rates in opposite directions (the
    # step count and P(second accepted) pin sums and products, so the optimum lies in valleys)
    moves: list[dict[int, float]] = [{i: sign} for i in range(depth + 1) for sign in (1.0, -1.0)]
    moves += [{i: sign, j: -sign} for i in range(depth) for j in range(i + 1, depth)
              for sign in (1.0, -1.0)]
    best = _accept_loss(params(x), cfgs, data, seeds)
    while max(step[:depth]) >= 0.01:
        improved = False
        for move in moves:
            trial = list(x)
            for i, sign in move.items():
                trial[i] = min(hi[i], max(lo[i], x[i] + sign * step[i]))
            if trial == x:
                continue
            loss = _accept_loss(params(trial), cfgs, data, seeds)
            if loss < best - 1e-9:
                best, x, improved = loss, trial, True
                break
        if not improved:
            step = [s / 2.0 for s in step]
    return params(x)


# -- step cost -------------------------------------------------------------------------------
def _columns(opts: FitOptions) -> list[tuple[str | None, str]]:
    cols: list[tuple[str | None, str]] = [(None, t) for t in opts.shared_terms]
    for m in METHODS:
        cols.extend((m, t) for t in opts.drafter_terms.get(m, ()))
    return cols


def _reads(opts: FitOptions, method: str, column: tuple[str | None, str]) -> bool:
    """Whether a configuration of ``method`` ("target", "draft", "eagle") reads ``column``."""
    owner, term = column
    if owner is None:
        return term not in opts.own_terms.get(method, ())
    return owner == method or opts.borrowed.get(method) == (term, owner)


@dataclass(frozen=True, slots=True)
class _Row:
    config: str
    features: tuple[float, ...]
    target_ms: float
    weight: float


def _mean_run(runs: Sequence[ConfigRun]) -> tuple[tuple[float, ...],
                                                  dict[tuple[int, int], tuple[tuple[float, ...],
                                                                              float]]]:
    n = len(runs)
    total = tuple(sum(r.features[i] for r in runs) / n for i in range(len(HOST_COST_TERMS)))
    windows: dict[tuple[int, int], tuple[tuple[float, ...], float]] = {}
    for key in set().union(*(r.windows for r in runs)):
        have = [r.windows[key] for r in runs if key in r.windows]
        feats = tuple(sum(w.features[i] for w in have) / len(have)
                      for i in range(len(HOST_COST_TERMS)))
        windows[key] = (feats, sum(w.tokens for w in have) / len(have))
    return total, windows


def _rows(cfg: MeasuredConfig, runs: Sequence[ConfigRun], opts: FitOptions) -> list[_Row]:
    total, windows = _mean_run(runs)
    rows = [_Row(cfg.name, total, cfg.elapsed_s * 1000.0, 1.0)]
    for m in cfg.rewards:
        if (m.bucket, m.gamma) not in windows or m.per_ms <= 0:
            continue
        feats, tokens = windows[(m.bucket, m.gamma)]
        weight = opts.reward_weight * math.sqrt(min(m.observations, 32) / 32.0)
        rows.append(_Row(cfg.name, feats, tokens / m.per_ms, weight))
    return rows


def fit_costs(data: Measurements, accept: dict[str, AcceptParams],
              leave_out: str | None = None,
              opts: FitOptions | None = None) -> dict[str, dict[str, float]]:
    """The joint NNLS of the step cost (module doc). Every configuration is simulated with
    its fixed gamma or the per-bucket gammas its log shows, so the steps do not depend on the
    coefficients being fitted (any positive ones will do)."""
    opts = opts or FitOptions()
    cols = _columns(opts)
    fitted = {t for _, t in cols}
    fixed = {t: v for t, v in (("prefill_per_token_ms", opts.prefill_per_token_ms),
                               ("draft_ingest_per_token_ms", opts.draft_ingest_per_token_ms))
             if t not in fitted}
    coef = {m: {**_UNIT, **fixed} for m in (*METHODS, "target")}
    index = {t: i for i, t in enumerate(HOST_COST_TERMS)}
    a_rows: list[list[float]] = []
    b: list[float] = []
    for cfg in data.measured:
        if cfg.name == leave_out:
            continue
        method = cfg.method
        cal = Calibration(accept, coef)
        sc = config_scenario(cfg, data, cal.accept_for(cfg), cal.cost(cfg, data))
        runs = [simulate_config(cfg, sc, s, recorded=True) for s in opts.fit_seeds]
        for row in _rows(cfg, runs, opts):
            rhs = row.target_ms - sum(v * row.features[index[t]] for t, v in fixed.items())
            scale = row.weight / row.target_ms
            a_rows.append([row.features[index[t]] * scale if _reads(opts, method, (m, t))
                           else 0.0 for m, t in cols])
            b.append(rhs * scale)
    for prior in data.priors:
        feats = HostCost(1.0, 0.0).features(prior.batch, prior.batch * prior.gamma,
                                            prior.gamma, prior.batch, 0)
        scale = opts.prior_weight / prior.ms
        a_rows.append([feats[index[t]] * scale if m == prior.method and t in prior.terms
                       else 0.0 for m, t in cols])
        b.append(opts.prior_weight)
    solution = nnls([[r[j] for r in a_rows] for j in range(len(cols))], b)
    out: dict[str, dict[str, float]] = {}
    for m in (*METHODS, "target"):
        values = dict(fixed)
        for col, v in zip(cols, solution, strict=True):
            if _reads(opts, m, col):
                values[col[1]] = values.get(col[1], 0.0) + v
        out[m] = values
    return out


def calibrate(data: Measurements, leave_out: str | None = None,
              opts: FitOptions | None = None) -> Calibration:
    """Acceptance, then step cost."""
    opts = opts or FitOptions()
    accept = {m: fit_acceptance(data, m, leave_out, opts.fit_seeds) for m in METHODS}
    return Calibration(accept, fit_costs(data, accept, leave_out, opts), leave_out, opts)


# -- predictions ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Prediction:
    """Simulated vs measured throughput of one configuration."""

    config: str
    measured: float
    predicted: float
    predicted_recorded: float | None  # the online run with the gammas its log shows
    steps: float

    @property
    def ratio(self) -> float:
        """Predicted / measured."""
        return self.predicted / self.measured


def predict(cal: Calibration, data: Measurements, cfg: MeasuredConfig) -> Prediction:
    """Simulate ``cfg`` with the calibration (mean over the prediction seeds)."""
    sc = config_scenario(cfg, data, cal.accept_for(cfg), cal.cost(cfg, data))
    seeds = cal.options.predict_seeds
    runs = [simulate_config(cfg, sc, s) for s in seeds]
    recorded = None
    if cfg.schedule:
        rec = [simulate_config(cfg, sc, s, recorded=True) for s in seeds]
        recorded = sum(r.throughput for r in rec) / len(rec)
    return Prediction(cfg.name, cfg.throughput, sum(r.throughput for r in runs) / len(runs),
                      recorded, sum(r.steps for r in runs) / len(runs))


def leave_one_out(data: Measurements, name: str, opts: FitOptions | None = None) -> Prediction:
    """Fit on every configuration but ``name`` and predict ``name``."""
    cal = calibrate(data, leave_out=name, opts=opts)
    return predict(cal, data, data.get(name))


def with_options(cal: Calibration, **changes: float) -> Calibration:
    """``cal`` with fixed (unfitted) coefficients changed, for sensitivity runs."""
    coef = {m: {**v, **changes} for m, v in cal.coefficients.items()}
    return replace(cal, coefficients=coef)
