"""Ablations and sensitivity runs on an NPU calibration (``vllm-hust-vspec-sim explain-npu``).

:func:`ablations` simulates the draft model's measured online and fixed-gamma configurations
with one mechanism changed at a time (the off-path admission cost, refill cohorts, the
per-bucket gamma, the admission cost itself); :func:`tail_share` is the share of a
configuration's simulated time spent at small batches; :func:`sensitivity` refits the step
cost with one parameter the data cannot pin set to another value and reports the fitted
throughputs, the online/fixed ratio and the steady gamma-2 over gamma-0 goodput at batch 128.
:func:`explain_doc` gathers them as one JSON-ready document.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..engine import simulate
from ..host_cost import HOST_COST_TERMS, HostCost
from .fit import Calibration, FitOptions, fit_costs
from .measurements import MeasuredConfig, Measurements
from .simulate import AcceptParams, config_controller, config_scenario, simulate_config


@dataclass(frozen=True, slots=True)
class Variant:
    """One simulated variant: a label and its throughput (tokens per second)."""

    label: str
    throughput: float


def _throughput(cal: Calibration, data: Measurements, cfg: MeasuredConfig, *,
                recorded: bool = True, **cost_changes: float) -> float:
    cost = cal.cost(cfg, data)
    if cost_changes:
        values = {name: float(getattr(cost, name)) for name in HOST_COST_TERMS}
        values.update(cost_changes)
        cost = HostCost(capture_sizes=cost.capture_sizes, native_gammas=cost.native_gammas,
                        **values)
    sc = config_scenario(cfg, data, cal.accept_for(cfg), cost)
    runs = [simulate_config(cfg, sc, s, recorded=recorded) for s in cal.options.predict_seeds]
    return sum(r.throughput for r in runs) / len(runs)


def ablations(cal: Calibration, data: Measurements) -> list[Variant]:
    """The draft model's online run and its best fixed gamma, one mechanism at a time."""
    online = data.get("draft-online")
    fixed3 = data.get("draft-fixed-3")
    fixed4 = data.get("draft-fixed-4")
    all2 = tuple((b, 2) for b, _ in online.schedule)
    out = [
        Variant("measured: online (gamma 2 at bucket 128, 3 below)", online.throughput),
        Variant("measured: fixed 3", fixed3.throughput),
        Variant("measured: fixed 4", fixed4.throughput),
        Variant("model: online, gammas of its log", _throughput(cal, data, online)),
        Variant("model: fixed 3", _throughput(cal, data, fixed3)),
        Variant("model: fixed 4", _throughput(cal, data, fixed4)),
        Variant("model: fixed 3, admissions at gamma 3 as cheap as at the native 2",
                _throughput(cal, data, fixed3, offpath_pass_ms=0.0)),
        Variant("model: fixed 4, admissions as cheap as at the native 2",
                _throughput(cal, data, fixed4, offpath_pass_ms=0.0)),
        Variant("model: online with gamma 2 in every bucket (no per-bucket gamma)",
                _throughput(cal, data, replace(online, schedule=all2))),
        Variant("model: online without refill cohorts (refill 1)",
                _throughput(cal, data, replace(online, refill=1))),
        Variant("model: fixed 3 without refill cohorts",
                _throughput(cal, data, replace(fixed3, refill=1))),
        Variant("model: online, no admission cost at all",
                _throughput(cal, data, online, admission_ms=0.0)),
    ]
    return out


def tail_share(cal: Calibration, data: Measurements, name: str = "draft-online",
               below: int = 64) -> float:
    """Share of the configuration's simulated time spent with at most ``below`` requests."""
    cfg = data.get(name)
    sc = config_scenario(cfg, data, cal.accept_for(cfg), cal.cost(cfg, data))
    total = tail = 0.0
    for seed in cal.options.predict_seeds:
        run = simulate(sc, config_controller(cfg, sc, recorded=True), seed, trace=True)
        total += run.sim_seconds
        tail += sum(r["interval_s"] for r in run.trace if r["batch"] <= below)
    return tail / total if total else 0.0


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """Fitted throughputs (tokens per second, by configuration) under one assumption, and
    the draft scenario's steady goodput of gamma 2 over gamma 0 at batch 128."""

    label: str
    fitted: dict[str, float]
    coefficients: dict[str, dict[str, float]]
    g2_over_g0_b128: float


def steady_g2_over_g0(cal: Calibration, data: Measurements, batch: int = 128) -> float:
    """Expected committed tokens per second of gamma 2 over gamma 0 (a target-only step) at
    ``batch``, decode only, under the calibration's draft-model costs and acceptance."""
    cfg = data.get("draft-online")
    cost = cal.cost(cfg, data)
    target = cal.cost(data.get("target-only"), data)
    rates = cal.accept["draft"].conditional
    tokens = 1.0 + rates[0] + rates[0] * rates[1]
    return (tokens / cost.steady_time(batch, 2, 0)) / (1.0 / target.steady_time(batch, 0, 0))


def _fitted(cal: Calibration, data: Measurements) -> dict[str, float]:
    return {c.name: _throughput(cal, data, c, recorded=not c.policy.startswith("pred"))
            for c in data.measured}


def sensitivity(cal: Calibration, data: Measurements) -> list[Sensitivity]:
    """Refit the step cost with one unpinned assumption changed at a time (acceptance kept,
    except in the concentration rows, which change it and refit the cost)."""
    base = cal.options
    t1 = cal.coefficients["draft"]["target_per_token_ms"]
    cases: list[tuple[str, FitOptions, dict[str, AcceptParams]]] = [
        ("as calibrated", base, cal.accept),
        (f"prefill tokens cost like verified ones ({t1:.3f} ms)",
         replace(base, prefill_per_token_ms=t1), cal.accept),
        (f"draft model ingests each token at 1/28 of the target ({t1 / 28:.4f} ms)",
         replace(base, draft_ingest_per_token_ms=t1 / 28), cal.accept),
        ("without the batch-16 stage-timing prior", replace(base, prior_weight=0.0),
         cal.accept),
        ("stage-timing prior weighted 4x", replace(base, prior_weight=4 * base.prior_weight),
         cal.accept),
        ("logged rewards ignored (elapsed times only)", replace(base, reward_weight=0.0),
         cal.accept),
        ("logged rewards weighted 4x", replace(base, reward_weight=4 * base.reward_weight),
         cal.accept),
    ]
    cases.append(("target-only admission steps cost an EAGLE admission",
                  replace(base, own_terms={**base.own_terms, "target": ("admission_ms",)},
                          borrowed={"target": ("admission_ms", "eagle")}), cal.accept))
    for factor in (0.5, 2.0):
        acc = {m: replace(a, concentration=(a.concentration or 10.0) * factor)
               for m, a in cal.accept.items()}
        cases.append((f"per-request acceptance spread: concentration x{factor:g}", base, acc))
    out: list[Sensitivity] = []
    for label, opts, accept in cases:
        coef = fit_costs(data, accept, opts=opts)
        trial = Calibration(accept, coef, options=opts)
        out.append(Sensitivity(label, _fitted(trial, data), coef,
                               steady_g2_over_g0(trial, data)))
    return out


def explain_doc(cal: Calibration, data: Measurements, *,
                with_sensitivity: bool = False) -> dict[str, Any]:
    """The ablations (with each throughput over the modelled fixed gamma 3), the tail share
    and, with ``with_sensitivity``, every sensitivity row next to the measured throughputs."""
    variants = ablations(cal, data)
    fixed3 = next(v.throughput for v in variants if v.label == "model: fixed 3")
    doc: dict[str, Any] = {
        "ablations": [{"label": v.label, "tok_s": v.throughput,
                       "over_fixed_3": v.throughput / fixed3} for v in variants],
        "tail_share": tail_share(cal, data),
    }
    if with_sensitivity:
        doc["measured"] = {c.name: c.throughput for c in data.measured}
        doc["sensitivity"] = [
            {"assumption": s.label, "fitted": s.fitted, "coefficients": s.coefficients,
             "online_over_fixed_3": s.fitted["draft-online"] / s.fitted["draft-fixed-3"],
             "b128_g2_over_g0": s.g2_over_g0_b128}
            for s in sensitivity(cal, data)]
    return doc
