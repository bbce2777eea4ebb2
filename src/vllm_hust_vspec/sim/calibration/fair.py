"""Fair baselines on the calibrated NPU scenarios, under both readings of the data.

The calibration cannot tell how target-only's elapsed time divides between its decode steps
and its admission steps (docs/simulator.md, "What the data cannot pin"): the shipped fit
prices a target-only admitting step like the draft model's, the alternative like the EAGLE
host's, and every measured run fits either way. Refill holds group admissions, so a ratio to
target-only means little unless target-only gets the same holds. :func:`fair_rows` simulates,
on one calibration, target-only without holds, with vSpec's holds and with 0.14.3's
(0.14.3: refill 8 at any gamma, no bound), fixed gamma 2 and both online algorithms, all on
vSpec's host; :func:`alternative_calibration` refits the step cost under the other reading.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..engine import simulate
from ..policies import make_controller
from ..scenario import Scenario, parse_scenario
from .fit import Calibration, FitOptions, fit_costs
from .measurements import Measurements
from .scenarios import scenario_doc

ALTERNATIVE = "target-only admissions priced like the EAGLE host's"


def alternative_options(base: FitOptions) -> FitOptions:
    """``base`` with target-only reading EAGLE's admission column (the other reading)."""
    return replace(base, own_terms={**base.own_terms, "target": ("admission_ms",)},
                   borrowed={"target": ("admission_ms", "eagle")})


def alternative_calibration(cal: Calibration, data: Measurements) -> Calibration:
    """The step cost refitted under :data:`ALTERNATIVE` (acceptance kept)."""
    opts = alternative_options(cal.options)
    return Calibration(cal.accept, fit_costs(data, cal.accept, opts=opts), options=opts)


@dataclass(frozen=True, slots=True)
class FairRow:
    """One simulated row: label, mean tokens per second and mean gamma over the seeds."""

    label: str
    tok_s: float
    mean_gamma: float


def _mean(sc: Scenario, policy: str, seeds: tuple[int, ...]) -> tuple[float, float]:
    runs = [simulate(sc, make_controller(policy, sc), s) for s in seeds]
    return (sum(r.goodput for r in runs) / len(runs),
            sum(r.mean_gamma for r in runs) / len(runs))


def fair_rows(cal: Calibration, data: Measurements, method: str,
              seeds: tuple[int, ...] = tuple(range(1, 13))) -> list[FairRow]:
    """Target-only under three hold rules, fixed 2 and vSpec's online algorithms on the
    calibrated scenario of ``method`` built from ``cal``."""
    sc = parse_scenario(scenario_doc(cal, data, method), f"calibrated {method}")
    pred = replace(sc, refill_hold="always", refill_max_hold_steps=0)
    cases = [
        ("target-only, no holds", replace(sc, refill_batch=1), "fixed:0"),
        ("target-only + vSpec's holds (auto, <= 16 steps)", sc, "fixed:0"),
        (f"target-only + 0.14.3's holds (refill {sc.refill_batch} at any gamma, no bound)",
         pred, "fixed:0"),
        ("fixed gamma 2 + vSpec's holds", sc, "fixed:2"),
        ("vSpec online, thompson", sc, "online"),
        ("vSpec online, ucb1", sc, "online-ucb1"),
    ]
    rows = []
    for label, scenario, policy in cases:
        tok_s, gamma = _mean(scenario, policy, seeds)
        rows.append(FairRow(label, tok_s, gamma))
    return rows


__all__ = ["ALTERNATIVE", "FairRow", "alternative_calibration", "alternative_options",
           "fair_rows"]
