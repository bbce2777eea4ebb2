"""Pure summary math: per-run latency/throughput figures, medians with spread, pair ratios,
latency percentiles pooled over repetitions and the latency gates.

Figure names follow ``vllm bench serve``'s result JSON (``output_throughput``,
``mean_tpot_ms``, ``p99_ttft_ms``, ...) so results from either backend read the same way.
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


# The latency figures whose percentiles a pair reports and can gate on, and the percentiles.
LATENCY_METRICS = ("ttft", "tpot", "itl")
LATENCY_PERCENTILES = (50, 90, 99)
# Per-request lists of a result (the built-in client's ``requests``; ``vllm bench serve
# --save-detailed``'s parallel lists): kept in the per-run files, left out of summaries.
DETAIL_KEYS = ("requests", "input_lens", "output_lens", "ttfts", "itls", "latencies",
               "start_times", "queue_times", "generated_texts", "errors")


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


def latency_samples(result: Mapping[str, Any]) -> dict[str, list[float]] | None:
    """Per-request TTFT and TPOT and every ITL gap (ms) of the completed requests of one run
    result: from the built-in client's ``requests`` or from ``vllm bench serve``'s detailed
    lists (``ttfts``, ``itls``, ``latencies``, ``output_lens``, ``errors``). TPOT is
    ``(latency - TTFT) / (output tokens - 1)`` over requests with more than one token, as
    both backends define it. None when the result carries neither."""
    out: dict[str, list[float]] = {m: [] for m in LATENCY_METRICS}
    requests = result.get("requests")
    if isinstance(requests, list):
        for r in requests:
            if not r.get("ok"):
                continue
            o = RequestOutcome(ok=True, output_tokens=int(r.get("output_tokens") or 0),
                               ttft_s=float(r.get("ttft_s") or 0.0),
                               latency_s=float(r.get("latency_s") or 0.0),
                               itl_s=tuple(float(g) for g in r.get("itl_s") or ()))
            _add_request(out, o)
        return out
    ttfts, lats, lens = (result.get(k) for k in ("ttfts", "latencies", "output_lens"))
    if not (isinstance(ttfts, list) and isinstance(lats, list) and isinstance(lens, list)):
        return None
    itls = result.get("itls") or [[] for _ in ttfts]
    errors = result.get("errors") or ["" for _ in ttfts]
    for ttft, lat, n, gaps, error in zip(ttfts, lats, lens, itls, errors, strict=False):
        if error or not n:  # vllm bench serve: failed requests have an error and 0 tokens
            continue
        _add_request(out, RequestOutcome(ok=True, output_tokens=int(n), ttft_s=float(ttft),
                                         latency_s=float(lat),
                                         itl_s=tuple(float(g) for g in gaps or ())))
    return out


def _add_request(out: dict[str, list[float]], o: RequestOutcome) -> None:
    out["ttft"].append(o.ttft_s * 1e3)
    if (tpot := o.tpot_s) is not None:
        out["tpot"].append(tpot * 1e3)
    out["itl"].extend(g * 1e3 for g in o.itl_s)


def pooled_latency(results: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """``p50_ttft_ms`` ... ``p99_itl_ms`` over every request of every result (the repetitions
    of one arm pooled: a tail percentile from all their requests, not a median of tails), plus
    ``requests`` (how many were pooled). None when a result has no per-request timings."""
    pooled: dict[str, list[float]] = {m: [] for m in LATENCY_METRICS}
    for result in results:
        samples = latency_samples(result)
        if samples is None:
            return None
        for m in LATENCY_METRICS:
            pooled[m].extend(samples[m])
    out: dict[str, float] = {"requests": float(len(pooled["ttft"]))}
    for m in LATENCY_METRICS:
        for q in LATENCY_PERCENTILES:
            out[f"p{q}_{m}_ms"] = percentile(pooled[m], q)
    return out


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
    *((f"p{q}_{m}_ms", False) for m in LATENCY_METRICS for q in LATENCY_PERCENTILES),
)


def ratio(new: float, base: float) -> float:
    """new / base, or NaN when the base is zero."""
    return new / base if base else math.nan


@dataclass(frozen=True)
class LatencyGate:
    """``--max-<metric>-p99-ratio``: vSpec's p99 over target-only's, at most ``limit``."""

    metric: str  # one of LATENCY_METRICS
    limit: float
    baseline_ms: float | None
    vspec_ms: float | None
    source: str  # "pooled" | "median of repetitions" | "not measured"

    @property
    def value(self) -> float | None:
        """vSpec p99 / target-only p99 (None: not measured; NaN: a zero baseline)."""
        if self.baseline_ms is None or self.vspec_ms is None:
            return None
        return ratio(self.vspec_ms, self.baseline_ms)

    @property
    def passed(self) -> bool:
        """Measured and within the limit (inclusive); a gate that could not be measured
        fails, as an unmeasured tail cannot be said to be within it."""
        v = self.value
        return v is not None and not math.isnan(v) and v <= self.limit

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "figure": f"p99_{self.metric}_ms",
                "max_ratio": self.limit, "ratio": self.value, "baseline_ms": self.baseline_ms,
                "vspec_ms": self.vspec_ms, "source": self.source, "passed": self.passed}


@dataclass(frozen=True)
class PairComparison:
    """Medians per arm, the throughput ratio, pooled latency percentiles and the verdict."""

    figures: dict[str, tuple[Spread, Spread]]  # name -> (baseline, vspec)
    speedup: float  # median vspec throughput / median baseline throughput
    rep_speedups: tuple[float, ...]  # per repetition, vspec_i / baseline_i
    min_speedup: float
    throughput_passed: bool  # speedup >= min_speedup
    # arm ("baseline" / "vspec") -> pooled_latency() of its repetitions (None: not available)
    pooled: dict[str, dict[str, float] | None] = field(default_factory=dict)
    gates: tuple[LatencyGate, ...] = ()

    @property
    def passed(self) -> bool:
        """The throughput gate and every latency gate passed."""
        return self.throughput_passed and all(g.passed for g in self.gates)

    def to_dict(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "speedup_per_repetition": list(self.rep_speedups),
            "min_speedup": self.min_speedup,
            "throughput_passed": self.throughput_passed,
            "latency_gates": [g.to_dict() for g in self.gates],
            "passed": self.passed,
            "figures": {
                name: {"baseline": a.to_dict(), "vspec": b.to_dict(),
                       "ratio_of_medians": ratio(b.median, a.median)}
                for name, (a, b) in self.figures.items()
            },
            "pooled_latency": {
                **{arm: figures for arm, figures in self.pooled.items()},
                "ratio": pooled_ratios(self.pooled),
            },
        }


def pooled_ratios(pooled: Mapping[str, Mapping[str, float] | None]) -> dict[str, float]:
    """vSpec / target-only of every pooled percentile (empty when either arm has none)."""
    base, new = pooled.get("baseline"), pooled.get("vspec")
    if not base or not new:
        return {}
    return {k: ratio(new[k], base[k]) for k in base if k != "requests" and k in new}


def compare_pair(
    baseline: Sequence[Mapping[str, Any]],
    vspec: Sequence[Mapping[str, Any]],
    *,
    min_speedup: float,
    key: str = "output_throughput",
    max_p99_ratios: Mapping[str, float] | None = None,
) -> PairComparison:
    """Compare repeated runs of both arms (result dicts in repetition order).

    ``max_p99_ratios`` (metric -> limit, e.g. ``{"ttft": 1.2}``): the latency gates. Each
    compares p99 over every request of every repetition of each arm (pooled); results without
    per-request timings fall back to the median over repetitions of each run's own p99."""
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
    pooled = {"baseline": pooled_latency(baseline), "vspec": pooled_latency(vspec)}
    gates = tuple(_gate(metric, float(limit), pooled, figures)
                  for metric, limit in (max_p99_ratios or {}).items())
    return PairComparison(figures, speedup, reps, min_speedup, passed, pooled, gates)


def _gate(metric: str, limit: float, pooled: Mapping[str, Mapping[str, float] | None],
          figures: Mapping[str, tuple[Spread, Spread]]) -> LatencyGate:
    if metric not in LATENCY_METRICS:
        raise ValueError(f"no latency gate for {metric!r} (one of {', '.join(LATENCY_METRICS)})")
    name = f"p99_{metric}_ms"
    base, new = pooled.get("baseline"), pooled.get("vspec")
    if base and new and base.get("requests") and new.get("requests"):
        return LatencyGate(metric, limit, base[name], new[name], "pooled")
    if name in figures:
        a, b = figures[name]
        return LatencyGate(metric, limit, a.median, b.median, "median of repetitions")
    return LatencyGate(metric, limit, None, None, "not measured")


__all__ = [
    "DETAIL_KEYS",
    "LATENCY_METRICS",
    "LATENCY_PERCENTILES",
    "PAIR_FIGURES",
    "LatencyGate",
    "PairComparison",
    "RequestOutcome",
    "Spread",
    "compare_pair",
    "latency_samples",
    "median",
    "percentile",
    "pooled_latency",
    "pooled_ratios",
    "ratio",
    "summarize_requests",
]
