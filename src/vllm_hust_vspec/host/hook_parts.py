"""The scheduler hook's parts, one job each (host/hook.py puts them together).

* :class:`GuardedController`: the controller behind a fallback to the fixed upper bound;
* :class:`StickyCohort`: which requests a sticky gamma 0 pinned and whose drafts are void;
* :class:`RefillAdmission`: holding admissions so new requests arrive as a cohort;
* :class:`Telemetry`: metrics and the trace.

None of them names a vLLM class; they see the scheduler through a few attributes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from vllm_hust_vspec.adaptive.admission import RefillHold
from vllm_hust_vspec.adaptive.feedback import (
    Controller,
    ControllerSnapshot,
    LengthPolicy,
    StepFeedback,
    VerifyQuery,
)
from vllm_hust_vspec.adaptive.trace_record import TraceRecord
from vllm_hust_vspec.host.metrics import VSpecMetrics
from vllm_hust_vspec.host.trace import TraceWriter

logger = logging.getLogger("vllm_hust_vspec.host")

# A refill hold never lasts longer than this many consecutive steps (no starvation).
REFILL_MAX_HOLD_STEPS = 16
# Push buffered step metrics and per-arm reward estimates every this many observed steps, and
# whenever the engine goes idle (an idle server's /metrics is exact); in the first this-many
# steps also every step until the controller has arm estimates to show.
METRICS_FLUSH_EVERY = 64


class GuardedController:
    """Calls the controller; on its first exception switches to the fixed upper bound for
    the rest of the run, with one ERROR line and the fallback counter."""

    __slots__ = ("controller", "max_gamma", "failed", "_lengths", "_metrics")

    def __init__(self, controller: Controller, max_gamma: int,
                 metrics: VSpecMetrics | None = None) -> None:
        self.controller = controller
        self.max_gamma = max_gamma
        self.failed = False
        # decided once: a runtime-checkable protocol check is too slow for every step
        self._lengths = isinstance(controller, LengthPolicy)
        self._metrics = metrics

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
        if self._metrics is not None:
            self._metrics.fallbacks.inc()


class StickyCohort:
    """Sticky gamma 0: the cohort pinned at 0 for its lifetime, and the requests whose draft
    KV has holes (the drafter skipped their step), whose drafts must never be verified."""

    __slots__ = ("members", "tainted")

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.tainted: set[str] = set()

    def pinned(self) -> bool:
        """True while any request of the pinned cohort still runs."""
        return bool(self.members)

    def before_schedule(self, finished: set[str], requests: Mapping[str, Any]) -> None:
        """Forget finished requests (the scheduler's ``finished_req_ids``: O(finished), not a
        scan of the cohort), and void the drafts of tainted requests."""
        if not self.tainted:
            return
        if finished:
            self.members -= finished
            self.tainted -= finished
        for rid in self.tainted:
            request = requests.get(rid)
            if request is not None and request.spec_token_ids:
                request.spec_token_ids = []

    def covers(self, ids: Iterable[Any]) -> bool:
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

    def skip(self, scheduled: Mapping[str, int]) -> None:
        """The drafter is skipped after this step: its requests are tainted, and the first
        such step pins the cohort."""
        self.tainted.update(scheduled)
        if not self.members:
            self.members = set(scheduled)


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
        self.rule = RefillHold(batch, mode, REFILL_MAX_HOLD_STEPS)
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


class Telemetry:
    """Metrics (buffered, flushed every ``METRICS_FLUSH_EVERY`` steps and when idle) and the
    trace (one :class:`TraceRecord` per completed step)."""

    __slots__ = ("metrics", "trace", "_observed", "_arms_published")

    def __init__(self, metrics: VSpecMetrics | None, trace: TraceWriter | None) -> None:
        self.metrics = metrics
        self.trace = trace
        self._observed = 0
        self._arms_published = False

    def decision(self, gamma: int) -> None:
        """One scheduled step's gamma."""
        if self.metrics is not None:
            self.metrics.observe_decision(gamma)

    def step(self, drafted: tuple[int, ...], accepted: tuple[int, ...], committed: int,
             idle: bool, controller: GuardedController) -> None:
        """One completed step's counts; flushes on the cadence and when the engine is idle."""
        metrics = self.metrics
        if metrics is None:
            return
        metrics.observe_step(drafted, accepted, committed)
        self._observed += 1
        n = self._observed
        if (idle or n % METRICS_FLUSH_EVERY == 1
                or (n <= METRICS_FLUSH_EVERY and not self._arms_published)):
            self.flush(controller)

    def record(self, record: TraceRecord, idle: bool) -> None:
        """One completed step's trace line (handed to the writer in batches, and when idle)."""
        if self.trace is None:
            return
        self.trace.write(record.to_json())
        if idle:
            self.trace.push()

    def flush(self, controller: GuardedController) -> None:
        """Push buffered step metrics and the controller's per-arm estimates."""
        if self.metrics is None:
            return
        self.metrics.flush()
        report = controller.report()
        if report is not None and report.arm_goodput:
            # The report describes the last batch-size bucket, which may not be measured yet
            # (the tail of a run): the gauges then keep their last values.
            self.metrics.observe_arms(report.arm_goodput)
            self._arms_published = True

    def close(self, controller: GuardedController) -> None:
        """Final flush of both."""
        self.flush(controller)
        if self.trace is not None:
            self.trace.close()


__all__ = [
    "METRICS_FLUSH_EVERY",
    "REFILL_MAX_HOLD_STEPS",
    "GuardedController",
    "RefillAdmission",
    "StickyCohort",
    "Telemetry",
]
