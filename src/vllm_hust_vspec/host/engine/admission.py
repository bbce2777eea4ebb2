"""Cohort refill on the Scheduler (EngineCore process): holding the waiting queue so new
requests are admitted together, by the one hold rule (adaptive/admission.py)."""

from __future__ import annotations

import logging
from typing import Any

from vllm_hust_vspec.adaptive.admission import RefillHold
from vllm_hust_vspec.host.abi.neighbours import other_admission_policy
from vllm_hust_vspec.host.engine.metrics import VSpecMetrics

logger = logging.getLogger("vllm_hust_vspec.host")


class RefillAdmission:
    """Holds the waiting queue so new requests are admitted together, by the rule of
    :class:`~vllm_hust_vspec.adaptive.admission.RefillHold` (``auto``: while the measured
    fixed cost of an admitting step says grouping pays, at any gamma; ``speculating``:
    whenever speculation runs, at most ``REFILL_MAX_HOLD_STEPS`` steps in a row).

    It holds through the admission limit the host's WAITING loop reads: upstream vLLM's
    ``max_num_active_reqs`` or, on hosts without it (the vLLM-HUST core),
    ``max_num_running_reqs``. Holding sets that limit to the slots occupied now, which stops
    admission under both hosts' tests (``>=`` upstream, ``==`` on vLLM-HUST) and keeps the
    HUST scheduler's ``len(running) <= max_num_running_reqs`` invariant.

    When another plugin's admission policy is enabled (host/abi/neighbours.py, e.g. DLA's
    reserved-KV gate) the hold steps aside and says so once: two policies deciding on one
    waiting queue would each undo what the other measured."""

    __slots__ = ("rule", "held", "_metrics", "_saved", "yields_to")

    def __init__(self, batch: int, metrics: VSpecMetrics | None = None,
                 mode: str = "speculating", max_gamma: int = 8) -> None:
        self.rule = RefillHold(batch, mode, max_gamma=max_gamma)
        self.held = False
        self._metrics = metrics
        self._saved: tuple[str, int] | None = None  # the limit a hold replaced
        # the other admission policy this hold steps aside for (None: it holds as ruled)
        self.yields_to = other_admission_policy() if batch > 1 else None
        if self.yields_to is not None:
            logger.info("vSpec: refill hold off: %s's admission policy is enabled and decides "
                        "admission alone", self.yields_to)

    @property
    def batch(self) -> int:
        """Requests admitted together (1: no hold)."""
        return self.rule.batch

    @staticmethod
    def _occupied(scheduler: Any) -> int:
        # Paused streaming sessions are not in `running` but hold a slot (upstream vLLM).
        return len(scheduler.running) + int(
            getattr(scheduler, "num_waiting_for_streaming_input", 0))

    def begin(self, scheduler: Any, *, speculating: bool = True, gamma: int = 0) -> bool:
        """Before one ``schedule()``: admit nobody while holding (the admission limit is set
        to the occupied slot count for the call, as the last thing done). Call :meth:`end`
        after the call however it exits. ``speculating``: no sticky zero pins the running
        cohort; ``gamma``: what its steps verify. Returns whether it holds."""
        if self.yields_to is not None:
            self.held = False
            return False
        attr = admission_limit(scheduler)
        limit = getattr(scheduler, attr)
        occupied = self._occupied(scheduler) if scheduler.running else 0
        self.held = self.rule.decide(
            occupied=occupied, free=limit - occupied,
            waiting=len(scheduler.waiting), speculating=speculating, gamma=gamma)
        if not self.held:
            return False
        if self._metrics is not None:
            self._metrics.refill_holds.inc()
        self._saved = (attr, limit)
        setattr(scheduler, attr, occupied)
        return True

    def end(self, scheduler: Any) -> None:
        """After the ``schedule()`` call: the admission limit as it was (idempotent)."""
        saved = self._saved
        if saved is not None:
            self._saved = None
            setattr(scheduler, saved[0], saved[1])


def admission_limit(scheduler: Any) -> str:
    """The scheduler attribute its WAITING loop compares the occupied slots with."""
    return "max_num_active_reqs" if hasattr(scheduler, "max_num_active_reqs") \
        else "max_num_running_reqs"


__all__ = ["RefillAdmission", "admission_limit"]
