"""Pure summary math: per-run latency/throughput figures, medians with spread, pair ratios.

Figure names follow ``vllm bench serve``'s result JSON (``output_throughput``,
``mean_tpot_ms``, ...) so results from either backend read the same way.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestOutcome:
    """One request as the client saw it (times in seconds from the run's start)."""

    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    start_s: float = 0.0
    ttft_s: float = 0.0  # time to first token, from this request's start
    latency_s: float = 0.0  # end-to-end, from this request's start
    itl_s: tuple[float, ...] = ()  # gaps between streamed chunks after the first
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first; None for single-token outputs."""
        if self.output_tokens <= 1:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), numpy's default; 0.0 when empty."""
    # Not statistics.quantiles(method="inclusive"): that is the same definition but only at
    # evenly spaced cut points (q = 99.9 or 0 cannot be asked for) and, on Python 3.11, not for
    # a single value; its interpolation also rounds differently, so results would move.
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    """Median (mean of the middle two for even counts); 0.0 when empty."""
    # (a + b) / 2 for even counts, as numpy.median (and so vllm bench serve) computes it
    return float(statistics.median(values)) if values else 0.0


def _dist(prefix: str, values_s: Sequence[float], percentiles: Sequence[float]) -> dict[
    str, float
]:
    ms = [v * 1e3 for v in values_s]
    out = {
        f"mean_{prefix}_ms": statistics.fmean(ms) if ms else 0.0,
        f"median_{prefix}_ms": median(ms),
        # population deviation, as numpy.std's default (vllm bench serve's std_*_ms)
        f"std_{prefix}_ms": statistics.pstdev(ms) if len(ms) >= 2 else 0.0,
    }
    for q in percentiles:
        out[f"p{q:g}_{prefix}_ms"] = percentile(ms, q)
    return out


def summarize_requests(
    outcomes: Sequence[RequestOutcome], duration_s: float, percentiles: Sequence[float] = (99,)
) -> dict[str, Any]:
    """Throughput and latency figures of one run (``vllm bench serve`` key names)."""
    done = [o for o in outcomes if o.ok]
    out_tokens = sum(o.output_tokens for o in done)
    in_tokens = sum(o.prompt_tokens for o in done)
    dur = max(duration_s, 1e-9)
    tpots = [t for o in done if (t := o.tpot_s) is not None]
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(done),
        "failed": len(outcomes) - len(done),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(done) / dur,
        "output_throughput": out_tokens / dur,
        "total_token_throughput": (in_tokens + out_tokens) / dur,
    }
    result.update(_dist("ttft", [o.ttft_s for o in done], percentiles))
    result.update(_dist("tpot", tpots, percentiles))
    result.update(_dist("itl", [g for o in done for g in o.itl_s], percentiles))
    result.update(_dist("e2el", [o.latency_s for o in done], percentiles))
    return result


@dataclass(frozen=True)
class Spread:
    """Median of repeated measurements with their range."""

    median: float
    low: float
    high: float
    values: tuple[float, ...] = field(default=())

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        vs = tuple(float(v) for v in values)
        if not vs:
            return cls(0.0, 0.0, 0.0, ())
        return cls(median(vs), min(vs), max(vs), vs)

    @property
    def rel_range(self) -> float:
        """(high - low) / median: how far apart the repetitions were."""
        return (self.high - self.low) / self.median if self.median else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.low, "max": self.high,
                "values": list(self.values)}


# Figures compared across the two arms, with whether higher is better.
PAIR_FIGURES: tuple[tuple[str, bool], ...] = (
    ("output_throughput", True),
    ("request_throughput", True),
    ("mean_tpot_ms", False),
    ("median_tpot_ms", False),
    ("mean_ttft_ms", False),
    ("median_ttft_ms", False),
    ("mean_itl_ms", False),
    ("mean_e2el_ms", False),
)


def ratio(new: float, base: float) -> float:
    """new / base, or NaN when the base is zero."""
    return new / base if base else math.nan


@dataclass(frozen=True)
class PairComparison:
    """Medians per arm, the throughput ratio and the verdict."""

    figures: dict[str, tuple[Spread, Spread]]  # name -> (baseline, vspec)
    speedup: float  # median vspec throughput / median baseline throughput
    rep_speedups: tuple[float, ...]  # per repetition, vspec_i / baseline_i
    min_speedup: float
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "speedup_per_repetition": list(self.rep_speedups),
            "min_speedup": self.min_speedup,
            "passed": self.passed,
            "figures": {
                name: {"baseline": a.to_dict(), "vspec": b.to_dict(),
                       "ratio_of_medians": ratio(b.median, a.median)}
                for name, (a, b) in self.figures.items()
            },
        }


def compare_pair(
    baseline: Sequence[Mapping[str, Any]],
    vspec: Sequence[Mapping[str, Any]],
    *,
    min_speedup: float,
    key: str = "output_throughput",
) -> PairComparison:
    """Compare repeated runs of both arms (result dicts in repetition order)."""
    if not baseline or not vspec:
        raise ValueError("compare_pair needs at least one run of each arm")
    figures: dict[str, tuple[Spread, Spread]] = {}
    for name, _ in PAIR_FIGURES:
        if all(name in r for r in baseline) and all(name in r for r in vspec):
            figures[name] = (
                Spread.of([float(r[name]) for r in baseline]),
                Spread.of([float(r[name]) for r in vspec]),
            )
    base_t = [float(r[key]) for r in baseline]
    new_t = [float(r[key]) for r in vspec]
    speedup = ratio(median(new_t), median(base_t))
    reps = tuple(ratio(b, a) for a, b in zip(base_t, new_t, strict=False))
    passed = not math.isnan(speedup) and speedup >= min_speedup
    return PairComparison(figures, speedup, reps, min_speedup, passed)


__all__ = [
    "PAIR_FIGURES",
    "PairComparison",
    "RequestOutcome",
    "Spread",
    "compare_pair",
    "median",
    "percentile",
    "ratio",
    "summarize_requests",
]
