"""Acceptance models: which draft positions a request's verifier accepts.

Every model hands each request a tuple of *conditional* rates ``c[k]`` = P(draft position k is
accepted | positions < k were accepted), for k = 0..max_gamma-1. The engine then accepts
position k of a step that starts at output index n iff ``u[n + k] < c[k]`` with ``u`` the
request's own pre-drawn uniforms (one per output token). Keying the uniforms on the output
token index (not on the step) keeps outcomes common across policies: a token that is "easy"
for the drafter is easy whichever gamma drafted it.

Published rates are usually *unconditional* (P(first k+1 drafts all accepted)); convert them
with :func:`unconditional_to_conditional`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._strict import StrictObject

# Unconditional per-position acceptance rates from public reports.
ACCEPTANCE_PRESETS: dict[str, tuple[float, ...]] = {
    # EAGLE-1 drafting for Llama-3.1-8B-Instruct (vLLM blog / benchmarks).
    "eagle1-llama3.1-8b": (0.68, 0.39, 0.20, 0.10, 0.05),
    # EAGLE-3, K=3.
    "eagle3-k3": (0.73, 0.52, 0.35),
    # Qwen3-Next in-model MTP, k=3.
    "qwen3-next-mtp-k3": (0.873, 0.778, 0.675),
}


def unconditional_to_conditional(rates: list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """Turn P(positions 0..k all accepted) into P(position k accepted | 0..k-1 accepted).

    Raises ValueError when the rates increase (a conditional rate above 1 is impossible).
    """
    out: list[float] = []
    prev = 1.0
    for k, rate in enumerate(rates):
        if rate < 0.0 or rate > 1.0:
            raise ValueError(f"rate at position {k} must be in [0, 1], got {rate}")
        if rate > prev + 1e-12:
            raise ValueError(
                f"unconditional rates must not increase: position {k} has {rate} > {prev}"
            )
        out.append(rate / prev if prev > 0 else 0.0)
        prev = rate
    return tuple(out)


def extend_rates(cond: tuple[float, ...], depth: int) -> tuple[float, ...]:
    """Pad conditional rates to ``depth`` positions by repeating the last one."""
    if len(cond) >= depth:
        return cond[:depth]
    return cond + (cond[-1],) * (depth - len(cond))


def expected_accept_prefix(cond: tuple[float, ...]) -> tuple[float, ...]:
    """``S[k]`` = expected committed tokens with k drafts = 1 + sum_{m<=k} P(A >= m)."""
    out = [1.0]
    survive = 1.0
    for c in cond:
        survive *= c
        out.append(out[-1] + survive)
    return tuple(out)


def _beta(rng: random.Random, mean: float, concentration: float | None) -> float:
    if concentration is None or mean <= 0.0 or mean >= 1.0:
        return mean
    return rng.betavariate(mean * concentration, (1.0 - mean) * concentration)


@dataclass(frozen=True, slots=True)
class IidModel:
    """Every position accepted with the same alpha; alpha per request ~ Beta(mean, conc)."""

    alpha: float
    beta_concentration: float | None = None

    def draw(self, rng: random.Random, depth: int) -> tuple[float, ...]:
        """Conditional rates of one request."""
        a = _beta(rng, self.alpha, self.beta_concentration)
        return (a,) * depth

    def mean_rates(self, depth: int) -> tuple[float, ...]:
        """Conditional rates of the average request (used for summaries)."""
        return (self.alpha,) * depth


@dataclass(frozen=True, slots=True)
class PositionalModel:
    """Per-position conditional rates (past the list the last rate repeats)."""

    conditional: tuple[float, ...]
    beta_concentration: float | None = None

    def draw(self, rng: random.Random, depth: int) -> tuple[float, ...]:
        """Conditional rates of one request (each position jittered when a concentration is set)."""
        base = extend_rates(self.conditional, depth)
        if self.beta_concentration is None:
            return base
        return tuple(_beta(rng, c, self.beta_concentration) for c in base)

    def mean_rates(self, depth: int) -> tuple[float, ...]:
        """Conditional rates of the average request."""
        return extend_rates(self.conditional, depth)


@dataclass(frozen=True, slots=True)
class MixtureModel:
    """Each request follows one component, picked by weight."""

    weights: tuple[float, ...]
    components: tuple[StationaryModel, ...]

    def draw(self, rng: random.Random, depth: int) -> tuple[float, ...]:
        """Pick a component, then draw from it."""
        x = rng.random() * sum(self.weights)
        for w, comp in zip(self.weights, self.components, strict=True):
            x -= w
            if x < 0.0:
                return comp.draw(rng, depth)
        return self.components[-1].draw(rng, depth)

    def mean_rates(self, depth: int) -> tuple[float, ...]:
        """Weight-averaged unconditional rates, converted back to conditional."""
        total = sum(self.weights)
        uncond = [0.0] * depth
        for w, comp in zip(self.weights, self.components, strict=True):
            survive = 1.0
            for k, c in enumerate(comp.mean_rates(depth)):
                survive *= c
                uncond[k] += w / total * survive
        return unconditional_to_conditional([min(1.0, u) for u in _monotone(uncond)])


StationaryModel = IidModel | PositionalModel | MixtureModel


def _monotone(values: list[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(min(v, out[-1]) if out else v)
    return out


@dataclass(frozen=True, slots=True)
class Phase:
    """One stretch of a non-stationary workload; ``tokens``/``seconds`` None = until the end."""

    model: StationaryModel
    tokens: int | None = None
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class AcceptanceSpec:
    """Phases of acceptance over time; a stationary workload has a single open-ended phase.

    ``tokens`` counts tokens committed by the whole system during the phase (so every policy
    sees the same amount of work per phase); ``seconds`` counts simulated time. With ``cycle``
    the phases repeat.
    """

    phases: tuple[Phase, ...]
    cycle: bool = False

    @property
    def stationary(self) -> bool:
        """True when there is only one phase."""
        return len(self.phases) == 1


def parse_acceptance(obj: StrictObject) -> AcceptanceSpec:
    """Parse the scenario's ``acceptance`` object (see docs/simulator.md)."""
    kind = obj.string("type", choices=("iid", "positional", "mixture", "phased"))
    if kind != "phased":
        model = _parse_stationary(obj, kind)
        return AcceptanceSpec(phases=(Phase(model=model),))
    cycle = obj.boolean("cycle", False)
    phases: list[Phase] = []
    items = obj.objects("phases")
    for i, item in enumerate(items):
        tokens = item.integer("tokens", 0, lo=1) if item.has("tokens") else None
        seconds = item.number("seconds", 0.0, lo=0.0, lo_open=True) if item.has("seconds") else None
        if tokens is not None and seconds is not None:
            raise item.error("tokens", "give either 'tokens' or 'seconds', not both")
        last = i == len(items) - 1
        if tokens is None and seconds is None and (cycle or not last):
            raise item.error("tokens", "every phase but an open-ended last one needs "
                             "'tokens' or 'seconds'")
        model_obj = item.child("model")
        model = _parse_stationary(model_obj, model_obj.string(
            "type", choices=("iid", "positional", "mixture")))
        model_obj.finish()
        item.finish()
        phases.append(Phase(model=model, tokens=tokens, seconds=seconds))
    return AcceptanceSpec(phases=tuple(phases), cycle=cycle)


def _parse_stationary(obj: StrictObject, kind: str) -> StationaryModel:
    conc = obj.number("beta_concentration", 0.0, lo=0.0, lo_open=True) \
        if obj.has("beta_concentration") else None
    if kind == "iid":
        if conc is not None and obj.has("alpha_beta"):
            raise obj.error("alpha_beta", "give 'alpha' (+ 'beta_concentration') or 'alpha_beta'")
        if obj.has("alpha_beta"):
            ab = obj.numbers("alpha_beta", lo=0.0)
            if len(ab) != 2 or ab[0] <= 0 or ab[1] <= 0:
                raise obj.error("alpha_beta", "expected [a, b] with a > 0 and b > 0")
            return IidModel(alpha=ab[0] / (ab[0] + ab[1]), beta_concentration=ab[0] + ab[1])
        return IidModel(alpha=obj.number("alpha", lo=0.0, hi=1.0), beta_concentration=conc)
    if kind == "positional":
        has_preset = obj.has("preset")
        has_rates = obj.has("rates")
        if has_preset == has_rates:
            raise obj.error("rates", "give exactly one of 'rates' or 'preset'")
        if has_preset:
            name = obj.string("preset", choices=tuple(sorted(ACCEPTANCE_PRESETS)))
            rates: list[float] | tuple[float, ...] = ACCEPTANCE_PRESETS[name]
            conditional = False
        else:
            rates = obj.numbers("rates", lo=0.0, hi=1.0)
            conditional = obj.boolean("conditional", False)
        if conditional:
            cond = tuple(rates)
        else:
            try:
                cond = unconditional_to_conditional(rates)
            except ValueError as exc:
                raise obj.error("rates", f"{exc} (set \"conditional\": true if these are "
                                "conditional rates)") from None
        return PositionalModel(conditional=cond, beta_concentration=conc)
    # mixture
    if conc is not None:
        raise obj.error("beta_concentration", "not allowed on a mixture; set it per component")
    weights: list[float] = []
    comps: list[StationaryModel] = []
    for item in obj.objects("components"):
        weights.append(item.number("weight", lo=0.0, lo_open=True))
        sub = item.child("model")
        comps.append(_parse_stationary(sub, sub.string("type", choices=("iid", "positional"))))
        sub.finish()
        item.finish()
    return MixtureModel(weights=tuple(weights), components=tuple(comps))
