"""Workload: when requests arrive and how long their prompts and outputs are.

All draws come from streams seeded by (seed, request index), so every policy run with the same
seed sees the same requests in the same order; only closed-loop arrival *times* depend on the
policy (a new request arrives when an old one finishes).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ._strict import StrictObject


@dataclass(frozen=True, slots=True)
class LengthDist:
    """Token-count distribution: ``fixed`` (value), ``uniform`` (low..high inclusive),
    ``lognormal`` (median, sigma; clipped to low..high) or ``list`` (an exact workload: request
    ``i`` gets ``values[i % len(values)]`` under every seed)."""

    kind: str
    value: int = 0
    low: int = 1
    high: int = 1
    median: float = 0.0
    sigma: float = 0.0
    values: tuple[int, ...] = ()

    def draw(self, rng: random.Random, index: int = 0) -> int:
        """One length (>= 1) for request ``index``."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "list":
            return self.values[index % len(self.values)]
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        x = int(round(self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))))
        return min(self.high, max(self.low, x))

    @property
    def mean_hint(self) -> float:
        """Rough mean (for summaries only)."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            return 0.5 * (self.low + self.high)
        if self.kind == "list":
            return sum(self.values) / len(self.values)
        return min(float(self.high), self.median * math.exp(0.5 * self.sigma**2))


@dataclass(frozen=True, slots=True)
class Arrival:
    """``closed`` (fixed concurrency), ``poisson`` (rate, optional burstiness = coefficient of
    variation of gaps, > 1 is bursty) or ``bursts`` (``burst_size`` requests every
    ``period_s`` seconds)."""

    kind: str
    concurrency: int = 0
    rate_per_s: float = 0.0
    cv: float = 1.0
    burst_size: int = 0
    period_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SloClass:
    """A class of requests sharing a TPOT service-level objective (``tpot_ms``), drawn for
    each request with probability proportional to ``weight``."""

    name: str
    weight: float
    tpot_ms: float


@dataclass(frozen=True, slots=True)
class Workload:
    """What the simulated users send (``slo_classes``: empty when requests carry no SLO)."""

    num_requests: int
    arrival: Arrival
    prompt_len: LengthDist
    output_len: LengthDist
    slo_classes: tuple[SloClass, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request, identical across policies for a given seed."""

    rid: int
    prompt_len: int
    output_len: int
    arrival_s: float  # ignored (replaced by completion times) for closed-loop workloads
    slo_class: str | None = None
    slo_tpot_ms: float | None = None


def make_requests(workload: Workload, seed: int) -> list[RequestSpec]:
    """Draw the request list for ``seed``."""
    lens = random.Random(f"vspec-lengths/{seed}")
    gaps = random.Random(f"vspec-arrivals/{seed}")
    # its own stream, so adding SLO classes leaves lengths and arrivals as they were
    slo_rng = random.Random(f"vspec-slo/{seed}")
    classes = workload.slo_classes
    total_weight = sum(c.weight for c in classes)
    arr = workload.arrival
    out: list[RequestSpec] = []
    t = 0.0
    for i in range(workload.num_requests):
        if arr.kind == "poisson":
            if i > 0:
                t += _gap(gaps, arr.rate_per_s, arr.cv)
        elif arr.kind == "bursts":
            t = (i // arr.burst_size) * arr.period_s
        slo = _pick_class(classes, slo_rng.random() * total_weight) if classes else None
        out.append(RequestSpec(
            rid=i,
            prompt_len=workload.prompt_len.draw(lens, i),
            output_len=workload.output_len.draw(lens, i),
            arrival_s=t,
            slo_class=slo.name if slo else None,
            slo_tpot_ms=slo.tpot_ms if slo else None,
        ))
    return out


def _pick_class(classes: tuple[SloClass, ...], x: float) -> SloClass:
    """The class whose cumulative weight first exceeds ``x``."""
    for c in classes:
        if x < c.weight:
            return c
        x -= c.weight
    return classes[-1]  # rounding at the top end


def _gap(rng: random.Random, rate: float, cv: float) -> float:
    if abs(cv - 1.0) < 1e-9:
        return rng.expovariate(rate)
    # Gamma-distributed gaps with mean 1/rate and coefficient of variation cv.
    shape = 1.0 / (cv * cv)
    return rng.gammavariate(shape, 1.0 / (rate * shape))


def parse_length(obj: StrictObject) -> LengthDist:
    """Parse a length distribution object."""
    kind = obj.string("type", choices=("fixed", "uniform", "lognormal", "list"))
    if kind == "fixed":
        out = LengthDist(kind=kind, value=obj.integer("value", lo=1))
    elif kind == "list":
        raw = obj.raw("values")
        if (not isinstance(raw, list) or not raw
                or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in raw)):
            raise obj.error("values", "expected a non-empty list of integers >= 1")
        out = LengthDist(kind=kind, values=tuple(raw))
    elif kind == "uniform":
        low = obj.integer("low", lo=1)
        high = obj.integer("high", lo=1)
        if high < low:
            raise obj.error("high", f"must be >= low ({low}), got {high}")
        out = LengthDist(kind=kind, low=low, high=high)
    else:
        low = obj.integer("low", 1, lo=1)
        high = obj.integer("high", 1_000_000, lo=1)
        if high < low:
            raise obj.error("high", f"must be >= low ({low}), got {high}")
        out = LengthDist(
            kind=kind,
            median=obj.number("median", lo=1.0),
            sigma=obj.number("sigma", lo=0.0),
            low=low,
            high=high,
        )
    obj.finish()
    return out


def parse_workload(obj: StrictObject) -> Workload:
    """Parse the scenario's ``workload`` object."""
    num = obj.integer("num_requests", lo=1, hi=1_000_000)
    a = obj.child("arrival")
    kind = a.string("type", choices=("closed", "poisson", "bursts"))
    if kind == "closed":
        arrival = Arrival(kind=kind, concurrency=a.integer("concurrency", lo=1))
    elif kind == "poisson":
        arrival = Arrival(
            kind=kind,
            rate_per_s=a.number("rate_per_s", lo=0.0, lo_open=True),
            cv=a.number("cv", 1.0, lo=0.05, hi=20.0),
        )
    else:
        arrival = Arrival(
            kind=kind,
            burst_size=a.integer("burst_size", lo=1),
            period_s=a.number("period_s", lo=0.0, lo_open=True),
        )
    a.finish()
    prompt = obj.child("prompt_len")
    output = obj.child("output_len")
    out = Workload(
        num_requests=num,
        arrival=arrival,
        prompt_len=parse_length(prompt),
        output_len=parse_length(output),
        slo_classes=parse_slo_classes(obj) if obj.has("slo_classes") else (),
    )
    obj.finish()
    return out


def parse_slo_classes(obj: StrictObject) -> tuple[SloClass, ...]:
    """Parse ``slo_classes``: a non-empty list of ``{"name", "weight", "tpot_ms"}`` objects
    with distinct names."""
    out: list[SloClass] = []
    for c in obj.objects("slo_classes"):
        name = c.string("name")
        if any(x.name == name for x in out):
            raise c.error("name", f"duplicate SLO class {name!r}")
        out.append(SloClass(
            name=name,
            weight=c.number("weight", 1.0, lo=0.0, lo_open=True),
            tpot_ms=c.number("tpot_ms", lo=0.0, lo_open=True),
        ))
        c.finish()
    return tuple(out)
