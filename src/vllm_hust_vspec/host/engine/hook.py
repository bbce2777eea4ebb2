"""The per-Scheduler hook: one decision per step, its feedback, and the parts around them.

It runs in the EngineCore process. Gamma reaches the workers in the scheduler output's
``num_spec_tokens_to_schedule`` through one of two channels, chosen from the host's own
scheduler: where vLLM has its per-step K channel, ``schedule()`` asks
:meth:`SchedulerHook.decide` through :class:`GammaLookup` (standing in for
``Scheduler.dynamic_sd_lookup``); where it has none (the vLLM-HUST core), the hook carries
its own (:attr:`SchedulerHook.own_channel`): it decides once ``schedule()`` has returned, sets
the field on the output itself and sizes the async scheduler's draft placeholders to the
step's gamma. ``update_from_output()`` goes through :meth:`SchedulerHook.on_update` and
:meth:`SchedulerHook.end_update`; what a step teaches (the controller's observation, metrics,
trace) runs after vLLM has sent the next step to the workers (:meth:`SchedulerHook.settle`),
and before anything reads the controller. The pure parts of the loop (the guarded controller,
the sticky cohort) are adaptive/step_loop.py, shared with the simulator; refill admission is
host/engine/admission.py and telemetry host/engine/telemetry.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.adaptive.feedback import Controller, StepFeedback, VerifyQuery
from vllm_hust_vspec.adaptive.step_loop import GuardedController, StickyCohort
from vllm_hust_vspec.adaptive.trace_record import TraceRecord
from vllm_hust_vspec.host.engine.admission import RefillAdmission
from vllm_hust_vspec.host.engine.cost_prior.persisted import CostState
from vllm_hust_vspec.host.engine.metrics import VSpecMetrics
from vllm_hust_vspec.host.engine.telemetry import Telemetry
from vllm_hust_vspec.host.engine.trace import TraceWriter, host_facts, open_trace
from vllm_hust_vspec.host.wire import K_FIELD, SKIP_ATTR

if TYPE_CHECKING:
    from vllm_hust_vspec.adaptive.cost_prior import CostPrior
    from vllm_hust_vspec.host.engine.dp_agreement import DPAgreement
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")


@dataclass(slots=True)
class _StepRecord:
    """What schedule() decided for one SchedulerOutput, consumed by update_from_output()."""

    t_sched: float
    decided: int
    verified: int
    admitted: int
    held: bool
    skip: bool
    steady: bool
    waiting: int
    prefill: int = 0  # prompt tokens scheduled (new requests' chunks and continued ones)
    lengths: tuple[int, ...] | None = None
    trimmed: bool = False  # the per-request lengths left some drafts unverified


class GammaLookup:
    """Stands in for ``Scheduler.dynamic_sd_lookup``: indexing by batch size asks the hook."""

    def __init__(self, hook: SchedulerHook, size: int) -> None:
        self._hook = hook
        self._size = size

    def __getitem__(self, batch_size: int) -> int:
        return self._hook.decide(batch_size)

    def __len__(self) -> int:
        return self._size


class VSpecHostError(RuntimeError):
    """The scheduler hook cannot run with this configuration."""


@dataclass
class InsideStep:
    """Which per-step wrapper is running (a subclass's wrapped override may call the base
    method, whose wrapper must then pass through)."""

    schedule: bool = False
    update: bool = False


class SchedulerHook:
    """Per-Scheduler state: the decision, the gamma-0 mode, feedback and outputs."""

    def __init__(
        self,
        scheduler: Any,
        settings: Settings,
        controller: Controller,
        max_gamma: int,
        *,
        metrics: VSpecMetrics | None = None,
        trace: TraceWriter | None = None,
        cost_state: CostState | None = None,
        cost_prior: CostPrior | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.settings = settings
        self.max_gamma = max_gamma
        self.adaptive = settings.adaptive_speculation
        self.mode = "sticky" if settings.sticky_zero() else "sync"
        self.token_budget = int(scheduler.max_num_scheduled_tokens)
        self._metrics = metrics
        self.guard = GuardedController(controller, max_gamma, self._fallback)
        self.refill = self._refill(metrics)
        self.refill.rule.share(controller)  # the controller's step-cost model, if it has one
        self.telemetry = Telemetry(metrics, trace)
        self.cost_state = cost_state
        self.cost_prior = cost_prior  # what the controller started from (None: nothing)
        self.closed = False
        self.inside = InsideStep()
        # True where the host has no K channel: after_schedule() publishes gamma itself.
        self.own_channel = False
        self._placeholders: dict[int, list[int]] = {}
        self._records: dict[int, _StepRecord] = {}
        self._pending: Callable[[], None] | None = None  # a completed step's deferred feedback
        self._reset_steps()
        # the engine runs its start-up calibration once built
        # (host/engine/cost_prior/calibration.py)
        self.calibration_pending = False
        self.startup_profile: CostPrior | None = None  # this engine's dummy batches, if timed
        # lockstep data parallel: the ranks' one gamma per step (host/engine/dp_agreement.py)
        self.agreement: DPAgreement | None = None

    def _fallback(self) -> None:
        if self._metrics is not None:
            self._metrics.fallbacks.inc()

    def take_skipped_step(self) -> bool:
        """True when the step just run skipped the drafter on a runner that then drafts
        nothing (the zero-draft fast path's runners); cleared on reading. No request of that
        step has drafts to fetch from the worker."""
        skipped, self._skipped = self._skipped, False
        return skipped and self.settings.zero_fast_path()

    @property
    def failed(self) -> bool:
        """True once the controller raised (the fixed upper bound rules from then on)."""
        return self.guard.failed

    @property
    def controller(self) -> Controller:
        """The controller deciding gamma (behind :attr:`guard`, its fallback)."""
        return self.guard.controller

    @controller.setter
    def controller(self, controller: Controller) -> None:
        # Benchmarks swap controllers between repetitions; each gets a fresh fallback guard.
        self.settle()
        self.guard = GuardedController(controller, self.max_gamma, self._fallback)
        self.refill.rule.share(controller)

    def _reset_steps(self) -> None:
        """The per-step state of an engine that has served nothing yet."""
        self.sticky: StickyCohort[str] = StickyCohort()
        self.step = 0
        self.last_decided = self.max_gamma  # drafts made before the first decision use max K
        self._decided: int | None = None
        self._records.clear()
        self._last_update_t: float | None = None
        self._idle = True
        self._lengths: tuple[int, ...] | None = None  # this step's per-request lengths
        self._trimmed = False  # ... and whether they left drafts unverified
        self._skipped = False  # the last step skipped the drafter

    # ---- start-up calibration ----------------------------------------------------------
    @contextmanager
    def calibrating(self, controller: Controller) -> Iterator[None]:
        """Steps run inside are vSpec's own start-up calibration
        (host/engine/cost_prior/calibration.py):
        ``controller`` decides them, nothing of them reaches the metrics, the trace or the
        persisted state, and the per-step state starts afresh after (its requests are gone)."""
        self.settle()
        telemetry, state, refill = self.telemetry, self.cost_state, self.refill
        guard = self.guard
        self.telemetry = Telemetry(None, None)
        self.cost_state = None
        self.refill = RefillAdmission(1)
        self.guard = GuardedController(controller, self.max_gamma, None)
        try:
            yield
        finally:
            self.settle()
            self.telemetry, self.cost_state, self.guard = telemetry, state, guard
            self.refill = refill
            self._reset_steps()

    def _refill(self, metrics: VSpecMetrics | None) -> RefillAdmission:
        """The refill admission the settings ask for (``auto``: holds when measured to pay)."""
        batch = self.settings.refill_batch() if self.adaptive else 1
        return RefillAdmission(batch, metrics, self.settings.adaptive_refill_hold,
                               self.max_gamma)

    def restart(self, controller: Controller, prior: CostPrior | None,
                trace: TraceWriter | None) -> None:
        """Serve from here with ``controller`` (started from ``prior``), tracing to ``trace``."""
        self.controller = controller  # runs the old controller's pending feedback first
        self.cost_prior = prior
        self.telemetry = Telemetry(self._metrics, trace)

    def open_trace(self, prior: CostPrior | None) -> TraceWriter | None:
        """The trace the settings ask for, its header naming ``prior`` and this engine's
        facts a re-calibration reads (host/engine/trace.py ``host_facts``)."""
        return open_trace(self.settings, prior,
                          host_facts(self.scheduler, self.max_gamma, self.refill.batch))

    # ---- decision ---------------------------------------------------------------------
    def decide(self, batch_size: int) -> int:
        """The gamma for this step (called by the scheduler through :class:`GammaLookup`).
        Under lockstep data parallel it is the group's agreed gamma, this rank's decision
        being one vote."""
        if self.mode == "sticky" and self.sticky.pinned():
            gamma = 0  # the controller is not asked while a cohort is pinned
        else:
            self.settle()
            gamma = self.guard.decide(batch_size, self.token_budget)
        if self.agreement is not None:
            gamma = self.agreement.agree(gamma, batch_size)
        self._decided = gamma
        return gamma

    # ---- schedule ---------------------------------------------------------------------
    def before_schedule(self) -> None:
        """Sticky bookkeeping before the scheduler runs (finished requests, void drafts)."""
        self._decided = None
        if self.calibration_pending:
            # served before any calibration ran: not built by an EngineCore vSpec calibrates
            # (a custom engine loop), so the controller serves from the prior it has
            self.calibration_pending = False
            logger.warning("vSpec: no start-up calibration: this engine served before one "
                           "could run; the controller starts from %s",
                           self.cost_prior.source if self.cost_prior else "no cost prior")
            self.telemetry.trace = self.open_trace(self.cost_prior)
        sched = self.scheduler
        sticky = self.sticky
        if sticky.tainted:
            sticky.forget(sched.finished_req_ids)
            # a tainted request's drafts are void (holes in its draft KV)
            requests = sched.requests
            for rid in sticky.tainted:
                request = requests.get(rid)
                if request is not None and request.spec_token_ids:
                    request.spec_token_ids = []

    def trim_drafts(self) -> None:
        """Per-request verify lengths: cut each running request's drafts to the length the
        controller gives it, before the scheduler schedules them (1 + drafts tokens)."""
        self._lengths = None
        self._trimmed = False
        if not self.guard.sets_lengths or self.sticky.pinned():
            return
        running = [r for r in self.scheduler.running if r.spec_token_ids]
        if not running:
            return
        query = VerifyQuery(tuple(r.request_id for r in running),
                            tuple(len(r.spec_token_ids) for r in running), self.token_budget)
        self.settle()
        lengths = self.guard.verify_lengths(query)
        if lengths is None:
            return
        for r, n in zip(running, lengths, strict=True):
            if n < len(r.spec_token_ids):
                r.spec_token_ids = r.spec_token_ids[:n]
                self._trimmed = True
        self._lengths = tuple(sorted(lengths))

    def begin_schedule(self) -> None:
        """Before one ``Scheduler.schedule()`` call: sticky draft discard, per-request
        lengths, refill hold. :meth:`end_schedule` must follow however the call exits."""
        self.before_schedule()
        self.trim_drafts()
        running = (getattr(r, "request_id", None) for r in self.scheduler.running)
        self.refill.begin(self.scheduler, speculating=self.sticky.speculating(running),
                          gamma=self.last_decided)

    def end_schedule(self) -> None:
        """After the ``schedule()`` call: undo the refill hold's admission limit."""
        self.refill.end(self.scheduler)

    @contextmanager
    def scheduling(self) -> Iterator[None]:
        """:meth:`begin_schedule` and :meth:`end_schedule` around a block."""
        self.begin_schedule()
        try:
            yield
        finally:
            self.end_schedule()

    def after_schedule(self, out: Any) -> None:
        """Record the decision, mark sticky skips, publish the chosen gamma."""
        num_sched: dict[str, int] = out.num_scheduled_tokens
        now = time.monotonic()
        self._skipped = False
        if not num_sched:
            return
        if self.own_channel:
            setattr(out, K_FIELD, self.decide(len(num_sched)))
        if self.adaptive and self._decided is None:
            # Every supported Scheduler.schedule asks dynamic_sd_lookup once it schedules
            # anything (the doctor's requirement); a replacement that does not would run a
            # fixed K while vSpec reports adaptive gamma.
            raise VSpecHostError(
                f"vSpec: {type(self.scheduler).__qualname__}.schedule() scheduled a step "
                "without asking Scheduler.dynamic_sd_lookup, so adaptive gamma cannot apply "
                "with this scheduler class; use vLLM's Scheduler (no --scheduler-cls, or "
                "vllm-ascend without a custom scheduler) or turn adaptive speculation off")
        decided = self._decided if self._decided is not None else getattr(
            out, K_FIELD, self.max_gamma)
        written = getattr(out, K_FIELD, None)
        if not self.own_channel and isinstance(written, int) and 0 <= written < decided:
            # Another writer in the scheduler capped the step (the vLLM-HUST core's
            # SpecRhythm: min(gamma, its largest per-request budget)): the workers draft what
            # the output carries, so that is the gamma this step runs and is learned at.
            decided = written
        skip = False
        if self.adaptive and self.mode == "sticky":
            decided, skip = self.sticky.resolve(decided, num_sched.keys(), self._settled)
        if skip:
            setattr(out, SKIP_ATTR, True)
            self._skipped = True
        spec = out.scheduled_spec_decode_tokens
        # Every request scheduled 1 + its drafts (no prefill chunk) <=> the totals agree, as
        # no request is ever scheduled fewer tokens than that.
        drafts = sum(len(t) for t in spec.values())
        steady = not out.scheduled_new_reqs and out.total_num_scheduled_tokens == len(
            num_sched
        ) + drafts
        # every scheduled request's first token is a decode's (or a new prompt's first): the
        # rest beyond the drafts is prompt
        prefill = 0 if steady else max(0, out.total_num_scheduled_tokens - len(num_sched)
                                       - drafts + len(out.scheduled_new_reqs))
        self._records[id(out)] = _StepRecord(
            t_sched=now,
            decided=decided,
            verified=self.last_decided,
            admitted=len(out.scheduled_new_reqs),
            held=self.refill.held,
            skip=skip,
            steady=steady,
            waiting=len(self.scheduler.waiting),
            prefill=prefill,
            lengths=self._lengths,
            trimmed=self._trimmed,
        )
        self.last_decided = decided
        self.telemetry.decision(decided)
        if self.own_channel:
            self._size_placeholders(num_sched, decided)

    def _settled(self) -> bool:
        self.settle()
        return self.guard.settled()

    def _size_placeholders(self, scheduled: dict[str, int], gamma: int) -> None:
        """The async scheduler gives every scheduled decode the fixed placeholders
        ``[-1] * max K`` for the drafts the worker makes after this step; on the own channel
        they are resized to the step's gamma, so the next step schedules what is drafted.
        Only the scheduler's own placeholder list is replaced (identity), never real drafts."""
        sched = self.scheduler
        fixed = getattr(sched, "_spec_token_placeholders", None)
        if fixed is None or gamma == len(fixed):
            return
        sized = self._placeholders.get(gamma)
        if sized is None:
            sized = self._placeholders[gamma] = [-1] * gamma
        requests = sched.requests
        for rid in scheduled:
            request = requests.get(rid)
            if request is not None and request.spec_token_ids is fixed:
                request.spec_token_ids = sized

    # ---- feedback ---------------------------------------------------------------------
    def on_update(self, out: Any, runner_output: Any) -> Callable[[bool], None]:
        """Build the step's feedback before vLLM consumes the output; returns what the step
        teaches (observe, metrics, trace), to hand to :meth:`end_update` once
        ``update_from_output`` ran. Its argument: whether the engine is idle after the step."""
        self.settle()  # the previous step's, if nothing ran it yet: observations stay in order
        now = time.monotonic()
        record = self._records.pop(id(out), None)
        if record is None:
            return _noop
        # Consecutive steps share boundaries (non-overlapping intervals); after an idle
        # engine the step starts at its own schedule() instead.
        start = (
            record.t_sched
            if (self._idle or self._last_update_t is None)
            else self._last_update_t
        )
        interval = max(now - start, 1e-9)
        self._last_update_t = now
        drafted, accepted, committed, ids = step_counts(out, runner_output)
        decode_committed = sum(accepted) + len(accepted)
        feedback: StepFeedback | None = None
        if drafted:
            feedback = StepFeedback(
                batch_size=len(drafted),
                gamma=record.verified,
                drafted=drafted,
                accepted=accepted,
                committed=decode_committed,
                interval_s=interval,
                token_budget=self.token_budget,
                steady=record.steady,
                drafter_ran=not record.skip,
                next_gamma=record.decided,
                request_ids=ids,
                lengths_trimmed=record.trimmed,
                prefill_tokens=record.prefill,
            )
            self.refill.rule.observe(feedback)
        # What this step's feedback goes to, as it is now (calibration swaps them).
        guard, cost_state, telemetry = self.guard, self.cost_state, self.telemetry
        t_wall = time.time()

        def finish(idle: bool) -> None:
            self.step += 1
            if feedback is not None:
                guard.observe(feedback)
                if cost_state is not None:
                    cost_state.observe(feedback)
            telemetry.step(drafted, accepted, committed, idle, guard)
            if telemetry.trace is not None:
                telemetry.record(TraceRecord(
                    t=t_wall, step=self.step, batch=len(drafted), gamma=record.verified,
                    decided=record.decided, drafted=sum(drafted), accepted=sum(accepted),
                    committed=decode_committed, tokens=committed, interval_s=interval,
                    reward=decode_committed / interval, steady=record.steady,
                    admitted=record.admitted, waiting=record.waiting, held=record.held,
                    skip=record.skip, fallback=guard.failed, lengths=record.lengths,
                ), idle)

        return finish

    def end_update(self, finish: Callable[[bool], None]) -> None:
        """After ``update_from_output``: run ``finish`` (from :meth:`on_update`) now if the
        engine is idle, else keep it for :meth:`settle`. The step's outputs leave and the next
        step is scheduled first, so none of this sits between two forwards."""
        # has_requests() stays true for one more step (finished ids to report), so it would
        # never see the engine idle; the unfinished count does.
        idle = self._idle = not self.scheduler.has_unfinished_requests()
        if idle:
            finish(True)
        else:
            self._pending = partial(finish, False)

    def settle(self) -> None:
        """Run the last step's deferred feedback, if any. The scheduler calls it once vLLM has
        sent the next step to the workers (``get_grammar_bitmask``, host/engine/scheduler.py),
        so it runs while they compute; every read of the controller calls it first."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            pending()

    def close(self) -> None:
        """Flush metrics and the trace (engine or scheduler shutdown). Idempotent."""
        if self.closed:
            return
        self.settle()
        self.closed = True
        if self.agreement is not None:
            logger.info("vSpec: %s", self.agreement.summary())
        if self.cost_state is not None:
            self.cost_state.save()
        self.telemetry.close(self.guard)


def _noop(idle: bool) -> None:
    return None


def step_counts(
    out: Any, runner_output: Any
) -> tuple[tuple[int, ...], tuple[int, ...], int, tuple[str, ...]]:
    """Per decoding request drafted and accepted counts, all tokens the step committed, and
    the decoding requests' ids (in the order of the counts).

    A request is decoding when it was scheduled exactly 1 + its drafts; partial prefill
    chunks and aborted requests sampled nothing and are left out, as is a request whose
    prefill completed in this step (it committed its first token, counted in the total)."""
    sampled = runner_output.sampled_token_ids
    index = runner_output.req_id_to_index
    spec = out.scheduled_spec_decode_tokens
    n_sampled = len(sampled) if sampled else 0
    committed = 0
    if not spec:
        # No drafts scheduled (a sticky gamma 0, every step of an idle drafter): the same
        # counts with a fraction of the work, as this runs every step.
        decoding: list[str] = []
        for rid, n in out.num_scheduled_tokens.items():
            i = index.get(rid)
            if i is None or i >= n_sampled:
                continue
            k = len(sampled[i])
            if k:
                committed += k
                if n == 1:
                    decoding.append(rid)
        zeros = (0,) * len(decoding)
        return zeros, zeros, committed, tuple(decoding)
    invalid = out.num_invalid_spec_tokens or {}
    drafted: list[int] = []
    accepted: list[int] = []
    ids: list[str] = []
    for rid, n in out.num_scheduled_tokens.items():
        i = index.get(rid)
        generated = sampled[i] if (i is not None and i < n_sampled) else ()
        if not len(generated):
            continue
        committed += len(generated)
        tokens = spec.get(rid) or ()
        if n != 1 + len(tokens):
            continue
        n_draft = max(len(tokens) - invalid.get(rid, 0), 0)
        drafted.append(n_draft)
        accepted.append(min(max(len(generated) - 1, 0), n_draft))
        ids.append(rid)
    return tuple(drafted), tuple(accepted), committed, tuple(ids)


__all__ = ["GammaLookup", "InsideStep", "SchedulerHook", "VSpecHostError",
           "step_counts"]
