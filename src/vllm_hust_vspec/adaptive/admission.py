"""When to hold admissions into cohorts: the refill hold's rule, read off the step-cost model.

A step that prefills prompts beside its decodes costs the decode step plus what admitting adds:
the prompts' own work, paid however admissions are grouped, and a fixed cost of a mixed step
(on a host with FULL graphs: a step outside the captured graphs; at a depth without a graph
for the mixed step, more). Only the fixed part is saved by grouping: holding the queue until
``n`` slots are free turns ``n`` admitting steps into one, at the price of slots left idle for
a few steps and a later first token. Both parts are terms of the one step-cost model
(:class:`~.cost_posterior.CostPosterior`, the online controller's when it has one): a hold
can pay once the fixed part at the depth being run, less ``_CONFIDENCE`` standard errors, is
above zero, and does while the throughput its idle slots lose stays below the fixed costs it
saves. A host whose admissions cost their prompts' work only does not hold; one whose mixed
steps leave the graphs (the Ascend B128 runs: ~5x a target-only decode step) holds long, at
every gamma.
"""

from __future__ import annotations

from ._limits import bucket_index
from .cost_posterior import CostPosterior, model_of
from .feedback import StepFeedback

_MIN_MIXED = 4  # admitting steps in the model before any verdict
_CONFIDENCE = 2.0  # standard errors the fixed cost must clear
# Step-time noise (log^2: ~30 % jitter) above which no hold is shown to pay: the model's
# split of so noisy a step between load, decode and admission is not one to hold on.
_NOISY_R = 0.1
# A hold never lasts longer than this many consecutive steps (no starvation): vSpec's bound.
REFILL_MAX_HOLD_STEPS = 16
# When the queue is held: "auto" (while grouping admissions pays), "speculating", "always".
REFILL_HOLD_MODES: tuple[str, ...] = ("auto", "speculating", "always")


class RefillHold:
    """When cohort refill holds the waiting queue: one rule for the host
    (host/engine/admission.py) and the simulator.

    The queue is held while fewer than ``min(batch, waiting)`` slots are free and:

    * ``auto`` (``mode``): the measured fixed cost of an admitting step at the depth being
      run pays for holding (module docstring), at any gamma, and only as long as the
      throughput the free slots lose while held (free / slots x the steady step, summed over
      the hold) stays below what admitting them together saves (one fixed cost per slot held);
    * ``speculating``: whenever speculation runs (vllm-hust-vSpec 0.14.3 held at any gamma,
      a pinned zero too: the same at gamma >= 1);
    * ``always``: at any gamma, a pinned zero included (vllm-hust-vSpec 0.14.3's rule: its
      hold never read gamma).

    Either way at most ``max_hold_steps`` steps in a row (0: no limit), which bounds the
    delay a hold adds to a waiting request's first token.
    """

    __slots__ = ("always", "batch", "cost", "max_hold_steps", "held_steps", "_loss", "_owns")

    def __init__(self, batch: int, mode: str,
                 max_hold_steps: int = REFILL_MAX_HOLD_STEPS, max_gamma: int = 8) -> None:
        if mode not in REFILL_HOLD_MODES:
            raise ValueError(f"refill hold mode must be one of {', '.join(REFILL_HOLD_MODES)},"
                             f" not {mode!r}")
        self.batch = batch
        self.always = mode == "always"
        # ``auto`` reads a step-cost model: its own until :meth:`share` hands it the
        # controller's (then the controller feeds it)
        self.cost = CostPosterior(max_gamma) if mode == "auto" and batch > 1 else None
        self._owns = True
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
        if cost.admissions < _MIN_MIXED or cost.tau <= 0.0 or cost.r > _NOISY_R:
            return False
        idx = bucket_index(occupied)
        fixed, sd = cost.admission_cost(idx, gamma)
        if fixed - _CONFIDENCE * sd <= 0.0:
            return False
        steady = cost.seconds(cost.mean_costs(
            idx, [cost.row(occupied, occupied * (1 + gamma), gamma, gamma > 0)])[0])
        # admitting the `free` held slots together with the next saves `free` admitting steps
        # over admitting each as it freed
        self._loss += free * steady / (occupied + free)
        return self._loss < free * fixed

    def share(self, controller: object) -> None:
        """Read ``controller``'s step-cost model (fed by it) when it learns one, else an own
        one (``auto`` only; the other modes read no cost)."""
        if self.cost is None:
            return
        model = model_of(controller)
        if model is not None:
            self.cost, self._owns = model, False
        elif not self._owns:
            self.cost, self._owns = CostPosterior(self.cost.max_gamma), True

    def observe(self, feedback: StepFeedback) -> None:
        """Feed a completed step to the own cost model (``auto``, until :meth:`share`); a
        step that switched depths mixes two arms' costs and is left out."""
        if self.cost is not None and self._owns and (
                feedback.next_gamma is None or feedback.next_gamma == feedback.gamma):
            self.cost.observe(feedback)

    def snapshot(self) -> dict[str, float | int]:
        """What the hold's rule reads, for reports: admitting steps seen and, once there is a
        model, the fixed cost of an admitting step at depth 0 (ms) with its sd."""
        cost = self.cost
        if cost is None or cost.tau <= 0.0 or not cost.buckets():
            return {"admitting_steps": 0 if cost is None else cost.admissions}
        idx = cost.buckets()[-1]
        fixed, sd = cost.admission_cost(idx, 0)
        return {"admitting_steps": cost.admissions, "fixed_ms": round(fixed * 1e3, 3),
                "fixed_sd_ms": round(sd * 1e3, 3)}


__all__ = ["REFILL_HOLD_MODES", "REFILL_MAX_HOLD_STEPS", "RefillHold"]
