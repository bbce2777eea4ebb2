"""What admitting requests costs, measured: whether holding admissions into cohorts pays.

A step that prefills ``P`` prompt tokens beside its decodes takes the decode step's steady
time plus ``A + c P``: ``c P`` is the prompts' work, paid however the admissions are grouped,
and ``A`` the fixed cost of a mixed step (on a host with FULL graphs:
a step outside the captured graphs). Only ``A`` is saved by grouping: holding the queue until
``n`` slots are free turns ``n`` admitting steps into one, at the price of slots left idle
for a few steps and a later first token.

:class:`AdmissionCost` estimates both from every decode step: the steady steps give the decode
time as a line in the batch size per verified gamma, each admitting step its excess over that
line, and ``A`` and ``c`` are the intercept and slope of the excess against ``P`` (discounted
least squares, both; prompt lengths vary, so the two separate within a few admissions). A
hold can pay once ``A``, less ``_CONFIDENCE`` standard errors, is above zero, and does while
the throughput its idle slots lose stays below the fixed costs it saves (:class:`RefillHold`).
A host whose admissions cost their prompts' work only (``A`` near 0) does not hold; one whose
mixed steps leave the graphs (the Ascend B128 runs: ``A`` ~5x a target-only decode step) holds
long, at every gamma.
"""

from __future__ import annotations

import math
from typing import Any

_HALFLIFE = 64.0  # observations: the memory of both fits
_MIN_MIXED = 4  # admitting steps (with a steady reference) before any verdict
_CONFIDENCE = 2.0  # standard errors the fixed cost must clear
# A hold never lasts longer than this many consecutive steps (no starvation): vSpec's bound.
REFILL_MAX_HOLD_STEPS = 16
# When the queue is held: "auto" (while grouping admissions pays), "speculating", "always".
REFILL_HOLD_MODES: tuple[str, ...] = ("auto", "speculating", "always")


class _Line:
    """Discounted least-squares line ``y = a + b x`` (``b`` = 0 while ``x`` has not varied)."""

    __slots__ = ("w", "sx", "sy", "sxx", "sxy", "syy", "n")

    def __init__(self) -> None:
        self.w = self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0
        self.n = 0

    def add(self, x: float, y: float, decay: float) -> None:
        self.w = decay * self.w + 1.0
        self.sx = decay * self.sx + x
        self.sy = decay * self.sy + y
        self.sxx = decay * self.sxx + x * x
        self.sxy = decay * self.sxy + x * y
        self.syy = decay * self.syy + y * y
        self.n += 1

    def _var_x(self) -> float:
        return self.sxx / self.w - (self.sx / self.w) ** 2

    def coefficients(self) -> tuple[float, float]:
        """(intercept, slope)."""
        var_x = self._var_x()
        mx, my = self.sx / self.w, self.sy / self.w
        b = (self.sxy / self.w - mx * my) / var_x if var_x > 1e-9 else 0.0
        return my - b * mx, b

    def at(self, x: float) -> float:
        """The line's value at ``x``."""
        a, b = self.coefficients()
        return a + b * x

    def intercept_se(self) -> float:
        """Standard error of the intercept (inf when the slope is not identified)."""
        var_x = self._var_x()
        if var_x <= 1e-9 or self.w <= 2.0:
            return math.inf
        a, b = self.coefficients()
        sse = (self.syy - 2 * a * self.sy - 2 * b * self.sxy + a * a * self.w
               + 2 * a * b * self.sx + b * b * self.sxx)
        sigma2 = max(sse, 0.0) / (self.w - 2.0)
        return math.sqrt(sigma2 * self.sxx / (self.w * self.w * var_x))


class AdmissionCost:
    """Online estimate of the fixed and per-request cost of admitting steps (module
    docstring); :meth:`holds_pay` is the refill hold's test."""

    __slots__ = ("_steady", "_excess", "_decay")

    def __init__(self) -> None:
        self._steady: dict[int, _Line] = {}  # per verified gamma: steady seconds vs batch
        self._excess = _Line()  # mixed steps: seconds over steady vs prompt tokens
        self._decay = 0.5 ** (1.0 / _HALFLIFE)

    def observe(self, batch: int, gamma: int, interval_s: float, prefill_tokens: int) -> None:
        """One completed step with ``batch`` decoding requests verifying ``gamma`` drafts and
        ``prefill_tokens`` prompt tokens (0: a steady step)."""
        if batch <= 0 or interval_s <= 0.0:
            return
        line = self._steady.get(gamma)
        if prefill_tokens <= 0:
            if line is None:
                line = self._steady[gamma] = _Line()
            line.add(float(batch), interval_s, self._decay)
        elif line is not None:
            self._excess.add(float(prefill_tokens), interval_s - line.at(batch), self._decay)

    def fixed_cost(self) -> tuple[float, float] | None:
        """(``A`` seconds, its standard error), or None before ``_MIN_MIXED`` admitting
        steps."""
        if self._excess.n < _MIN_MIXED:
            return None
        return self._excess.coefficients()[0], self._excess.intercept_se()

    def steady_time(self, batch: int, gamma: int) -> float | None:
        """Seconds of a steady step at ``batch`` verifying ``gamma`` (the nearest gamma
        measured), or None before any steady step."""
        if not self._steady:
            return None
        g = min(self._steady, key=lambda k: abs(k - gamma))
        return self._steady[g].at(batch)

    def holds_pay(self) -> bool:
        """True when admitting steps have a fixed cost, with confidence: something to save by
        grouping them (how long a hold pays is :class:`RefillHold`'s accounting)."""
        return self.confident_fixed_cost() is not None

    def confident_fixed_cost(self) -> float | None:
        """``A`` in seconds when it is above zero by ``_CONFIDENCE`` standard errors, else
        None."""
        fixed = self.fixed_cost()
        if fixed is None or fixed[0] - _CONFIDENCE * fixed[1] <= 0.0:
            return None
        return fixed[0]

    def snapshot(self) -> dict[str, Any]:
        """The estimate for reports: fixed and per-request cost (ms), admitting steps seen."""
        out: dict[str, Any] = {"admitting_steps": self._excess.n}
        fixed = self.fixed_cost()
        if fixed is not None:
            out.update(fixed_ms=round(fixed[0] * 1e3, 3), fixed_se_ms=round(fixed[1] * 1e3, 3),
                       per_prompt_token_ms=round(self._excess.coefficients()[1] * 1e3, 4))
        return out


class RefillHold:
    """When cohort refill holds the waiting queue: one rule for the host
    (host/engine/admission.py) and the simulator.

    The queue is held while fewer than ``min(batch, waiting)`` slots are free and:

    * ``auto`` (``mode``): the measured fixed cost of an admitting step pays for holding
      (:meth:`AdmissionCost.confident_fixed_cost`), at any gamma, and only as long as the
      throughput the free slots lose while held (free / slots x the steady step, summed over
      the hold) stays below what admitting them together saves (one fixed cost per slot held);
    * ``speculating``: whenever speculation runs (vllm-hust-vSpec 0.14.3 held at any gamma,
      a pinned zero too: the same at gamma >= 1);
    * ``always``: at any gamma, a pinned zero included (vllm-hust-vSpec 0.14.3's rule: its
      hold never read gamma).

    Either way at most ``max_hold_steps`` steps in a row (0: no limit), which bounds the
    delay a hold adds to a waiting request's first token.
    """

    __slots__ = ("always", "batch", "cost", "max_hold_steps", "held_steps", "_loss")

    def __init__(self, batch: int, mode: str,
                 max_hold_steps: int = REFILL_MAX_HOLD_STEPS) -> None:
        if mode not in REFILL_HOLD_MODES:
            raise ValueError(f"refill hold mode must be one of {', '.join(REFILL_HOLD_MODES)},"
                             f" not {mode!r}")
        self.batch = batch
        self.always = mode == "always"
        self.cost = AdmissionCost() if mode == "auto" and batch > 1 else None
        self.max_hold_steps = max_hold_steps
        self.held_steps = 0
        self._loss = 0.0  # seconds of slot time the current hold has left idle

    def decide(self, *, occupied: int, free: int, waiting: int, speculating: bool,
               gamma: int) -> bool:
        """Whether to hold the queue this step (counts the held steps)."""
        hold = (self.batch > 1 and waiting > 0 and occupied > 0
                and free < min(self.batch, waiting) and self._pays(occupied, free, speculating,
                                                                   gamma))
        self.held_steps = self.held_steps + 1 if hold else 0
        if not hold:
            self._loss = 0.0
        return hold

    def _pays(self, occupied: int, free: int, speculating: bool, gamma: int) -> bool:
        if self.max_hold_steps and self.held_steps >= self.max_hold_steps:
            return False  # a bound on the first-token delay a hold adds
        cost = self.cost
        if cost is None:
            return speculating or self.always
        fixed = cost.confident_fixed_cost()
        steady = cost.steady_time(occupied, gamma)
        if fixed is None or steady is None:
            return False
        # admitting the `free` held slots together with the next saves `free` admitting steps
        # over admitting each as it freed
        self._loss += free * steady / (occupied + free)
        return self._loss < free * fixed

    def observe(self, batch: int, gamma: int, interval_s: float, prefill_tokens: int) -> None:
        """Feed a completed step to the cost estimate (``auto`` only)."""
        if self.cost is not None:
            self.cost.observe(batch, gamma, interval_s, prefill_tokens)


__all__ = ["REFILL_HOLD_MODES", "REFILL_MAX_HOLD_STEPS", "AdmissionCost", "RefillHold"]
