"""Cohort refill on the Scheduler (EngineCore process): holding the waiting queue so new
requests are admitted together, by the one hold rule (adaptive/admission.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vllm_hust_vspec.adaptive.admission import RefillHold
from vllm_hust_vspec.host.engine.metrics import VSpecMetrics


class RefillAdmission:
    """Holds the waiting queue so new requests are admitted together, by the rule of
    :class:`~vllm_hust_vspec.adaptive.admission.RefillHold` (``auto``: while the measured
    fixed cost of an admitting step says grouping pays, at any gamma; ``speculating``:
    whenever speculation runs, at most ``REFILL_MAX_HOLD_STEPS`` steps in a row).

    It holds through the admission limit the host's WAITING loop reads: upstream vLLM's
    ``max_num_active_reqs`` or, on hosts without it (the vLLM-HUST core),
    ``max_num_running_reqs``. Holding sets that limit to the slots occupied now, which stops
    admission under both hosts' tests (``>=`` upstream, ``==`` on vLLM-HUST) and keeps the
    HUST scheduler's ``len(running) <= max_num_running_reqs`` invariant."""

    __slots__ = ("rule", "held", "_metrics")

    def __init__(self, batch: int, metrics: VSpecMetrics | None = None,
                 mode: str = "speculating") -> None:
        self.rule = RefillHold(batch, mode)
        self.held = False
        self._metrics = metrics

    @property
    def batch(self) -> int:
        """Requests admitted together (1: no hold)."""
        return self.rule.batch

    @staticmethod
    def _occupied(scheduler: Any) -> int:
        # Paused streaming sessions are not in `running` but hold a slot (upstream vLLM).
        return len(scheduler.running) + int(
            getattr(scheduler, "num_waiting_for_streaming_input", 0))

    @contextmanager
    def admission(self, scheduler: Any, *, speculating: bool = True,
                  gamma: int = 0) -> Iterator[bool]:
        """Around one ``schedule()``: admit nobody while holding (the admission limit is
        the occupied slot count for the call). The limit is restored however the block
        exits, and it is changed only inside the ``try``, so no exception can leave it
        lowered. ``speculating``: no sticky zero pins the running cohort; ``gamma``: what its
        steps verify."""
        attr = admission_limit(scheduler)
        occupied = self._occupied(scheduler) if scheduler.running else 0
        self.held = self.rule.decide(
            occupied=occupied, free=getattr(scheduler, attr) - occupied,
            waiting=len(scheduler.waiting), speculating=speculating, gamma=gamma)
        if not self.held:
            yield False
            return
        if self._metrics is not None:
            self._metrics.refill_holds.inc()
        saved = getattr(scheduler, attr)
        try:
            setattr(scheduler, attr, occupied)
            yield True
        finally:
            setattr(scheduler, attr, saved)


def admission_limit(scheduler: Any) -> str:
    """The scheduler attribute its WAITING loop compares the occupied slots with."""
    return "max_num_active_reqs" if hasattr(scheduler, "max_num_active_reqs") \
        else "max_num_running_reqs"


__all__ = ["RefillAdmission", "admission_limit"]
