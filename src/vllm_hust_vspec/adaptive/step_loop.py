"""The host loop's pure parts, one copy for the vLLM host, the simulator and the tests.

* :class:`GuardedController`: the controller behind a fallback to the fixed upper bound;
* :class:`StickyCohort`: the sticky gamma 0: which requests a settled zero pinned at 0 and
  whose drafts are void because the drafter skipped their step.

The refill hold's rule is :class:`~vllm_hust_vspec.adaptive.admission.RefillHold`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Generic, TypeVar

from .feedback import Controller, ControllerSnapshot, LengthPolicy, StepFeedback, VerifyQuery

logger = logging.getLogger("vllm_hust_vspec.host")

K = TypeVar("K", bound=Hashable)


class GuardedController:
    """Calls the controller; on its first exception switches to the fixed upper bound for
    the rest of the run, with one ERROR line and a call of ``on_fail`` (the host's fallback
    counter)."""

    __slots__ = ("controller", "max_gamma", "failed", "_lengths", "_on_fail")

    def __init__(self, controller: Controller, max_gamma: int,
                 on_fail: Callable[[], None] | None = None) -> None:
        self.controller = controller
        self.max_gamma = max_gamma
        self.failed = False
        # decided once: a runtime-checkable protocol check is too slow for every step
        self._lengths = isinstance(controller, LengthPolicy)
        self._on_fail = on_fail

    def decide(self, batch_size: int, token_budget: int) -> int:
        """The controller's gamma clamped to ``[0, max_gamma]``; the bound once it failed."""
        if self.failed:
            return self.max_gamma
        try:
            gamma = int(self.controller.decide(batch_size, token_budget))
        except Exception:
            self._fail("decide")
            return self.max_gamma
        return 0 if gamma < 0 else min(gamma, self.max_gamma)

    def observe(self, feedback: StepFeedback) -> None:
        """Hand one step's feedback over (nothing once it failed)."""
        if self.failed:
            return
        try:
            self.controller.observe(feedback)
        except Exception:
            self._fail("observe")

    @property
    def sets_lengths(self) -> bool:
        """True when the controller chooses per-request verify lengths (and has not failed)."""
        return self._lengths and not self.failed

    def verify_lengths(self, query: VerifyQuery) -> list[int] | None:
        """The controller's per-request lengths, each clamped to ``[0, drafts]``; None when
        it sets none or failed (every draft is verified then)."""
        if not self.sets_lengths:
            return None
        try:
            lengths = self.controller.verify_lengths(query)  # type: ignore[attr-defined]
            out = [min(max(int(n), 0), d) for n, d in zip(lengths, query.drafted, strict=True)]
        except Exception:
            self._fail("verify_lengths")
            return None
        return out

    def settled(self) -> bool:
        """A gamma-0 decision is a considered one (never after a failure)."""
        if self.failed:
            return False
        try:
            return bool(self.controller.settled())
        except Exception:
            self._fail("settled")
            return False

    def report(self) -> ControllerSnapshot | None:
        """What the metrics show, or None (failed, or the controller could not say)."""
        if self.failed:
            return None
        try:
            return self.controller.report()
        except Exception:
            logger.debug("vSpec: controller report unavailable for metrics", exc_info=True)
            return None

    def _fail(self, where: str) -> None:
        exc = sys.exc_info()[1]
        logger.error(
            "vSpec: controller.%s raised %s: %s; falling back to the fixed upper bound "
            "gamma=%d for the rest of this run", where, type(exc).__name__, exc, self.max_gamma,
        )
        logger.debug("vSpec: controller failure traceback", exc_info=True)
        self.failed = True
        if self._on_fail is not None:
            self._on_fail()


class StickyCohort(Generic[K]):
    """Sticky gamma 0: a settled zero pins the cohort it ran on at 0 for the cohort's lifetime
    and skips the drafter; every request of a skipped step has holes in its draft KV, so its
    drafts are never verified again (it is *tainted*). Requests are named by any hashable id.

    Per step: while :meth:`pinned` the gamma is 0 and the controller is not asked (its
    feedback still arrives); :meth:`resolve` once the step's requests are known;
    :meth:`forget` for finished ones."""

    __slots__ = ("members", "tainted")

    def __init__(self) -> None:
        self.members: set[K] = set()
        self.tainted: set[K] = set()

    def pinned(self) -> bool:
        """True while any request of the pinned cohort still runs."""
        return bool(self.members)

    def resolve(self, decided: int, scheduled: Collection[K],
                settled: Callable[[], bool]) -> tuple[int, bool]:
        """The step's gamma and whether the drafter is skipped after it.

        A zero while pinned, or a settled zero, skips the drafter: the step's requests are
        tainted and the first such step pins its cohort. A positive gamma on a step whose
        every request is tainted runs as gamma 0 with the drafter off, without a new pin
        (requests admitted from now on may draft)."""
        if decided == 0:
            if self.members or settled():
                self.skip(scheduled)
                return 0, True
            return 0, False
        if self.covers(scheduled):
            return 0, True
        return decided, False

    def speculating(self, running: Iterable[K]) -> bool:
        """False while a cohort is pinned or no running request could use a draft."""
        return not self.members and not self.covers(running)

    def forget(self, finished: Iterable[K]) -> None:
        """Drop finished requests."""
        if self.tainted:
            self.members.difference_update(finished)
            self.tainted.difference_update(finished)

    def covers(self, ids: Iterable[K]) -> bool:
        """True when there are tainted requests and every one of ``ids`` is among them (no
        request could use a draft)."""
        tainted = self.tainted
        if not tainted:
            return False
        seen = False
        for rid in ids:
            if rid not in tainted:
                return False
            seen = True
        return seen

    def skip(self, scheduled: Collection[K]) -> None:
        """The drafter is skipped after this step: its requests are tainted, and the first
        such step pins the cohort."""
        self.tainted.update(scheduled)
        if not self.members:
            self.members = set(scheduled)


__all__ = ["GuardedController", "StickyCohort"]
