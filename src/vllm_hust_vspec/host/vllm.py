"""Upstream vLLM (>= 0.31, V1 runner) host: the per-step gamma hook in the scheduler.

Everything here runs in the EngineCore process except :func:`_make_propose_wrapper`, which
runs on every worker (TP rank) and only reads a flag the scheduler put in its output.

How gamma reaches the drafter (vLLM 0.32 ``vllm/v1/core/sched/scheduler.py``):

* ``Scheduler.__init__`` builds ``self.dynamic_sd_lookup`` only for a configured batch-size
  schedule. When it is not ``None`` the scheduler (a) does not pad new decode requests to
  ``1 + max K`` (the ``self.dynamic_sd_lookup is None`` test in the WAITING loop) and
  (b) sets ``num_spec_tokens_to_schedule = self.dynamic_sd_lookup[len(num_scheduled_tokens)]``
  just before it builds the ``SchedulerOutput``. The hook installs a :class:`GammaLookup`
  there, so both happen for every step, and its ``__getitem__`` asks the controller. The
  value is therefore in place before ``_update_after_schedule`` (which the async scheduler
  reads to size its placeholders) and before the output is broadcast to all ranks.
* ``GPUModelRunner.propose_draft_token_ids`` passes ``scheduler_output.
  num_spec_tokens_to_schedule`` to ``propose(num_speculative_tokens=...)``; with K = 0 the
  EAGLE/draft proposers still run their first pass (the draft KV stays in sync) and return
  ``[B, 0]``: that is the ``sync`` gamma-0 mode for free. ``sticky`` additionally sets
  :data:`SKIP_ATTR` on the output and the wrapped ``propose_draft_token_ids`` then skips the
  drafter entirely.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_hust_vspec.adaptive.feedback import Controller, StepFeedback
from vllm_hust_vspec.host import controller_factory, fast_path
from vllm_hust_vspec.host.capabilities import ENGINE_CORE, MODEL_RUNNER, SCHEDULER
from vllm_hust_vspec.host.metrics import VSpecMetrics, arm_rewards, get_metrics
from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.trace import TraceWriter, run_header

logger = logging.getLogger("vllm_hust_vspec.host")

HOOK_ATTR = "_vspec_hook"
# Set on a SchedulerOutput when the drafter must not run after this step (sticky gamma 0).
SKIP_ATTR = "vspec_skip_draft"
# A refill hold never lasts longer than this many consecutive steps (no starvation).
REFILL_MAX_HOLD_STEPS = 16
# Push buffered step metrics and per-arm reward estimates every this many observed steps, and
# whenever the engine goes idle (an idle server's /metrics is exact); in the first this-many
# steps also every step until the controller has arm estimates to show.
METRICS_FLUSH_EVERY = 64
# Methods whose proposer drafts exactly the K it is given. suffix asserts K == configured K
# and custom_class ignores it, so neither can be driven per step.
SUPPORTED_METHODS = frozenset(
    {"draft_model", "eagle", "eagle3", "mtp", "ngram", "ngram_gpu", "medusa"}
)


class VSpecHostError(RuntimeError):
    """The scheduler hook cannot run with this configuration."""


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


class GammaLookup:
    """Stands in for ``Scheduler.dynamic_sd_lookup``: indexing by batch size asks the hook."""

    def __init__(self, hook: SchedulerHook, size: int) -> None:
        self._hook = hook
        self._size = size

    def __getitem__(self, batch_size: int) -> int:
        return self._hook.decide(batch_size)

    def __len__(self) -> int:
        return self._size


class SchedulerHook:
    """Per-Scheduler state: controller, gamma-0 mode, refill admission, feedback, outputs."""

    def __init__(
        self,
        scheduler: Any,
        settings: Any,
        controller: Controller,
        max_gamma: int,
        *,
        metrics: VSpecMetrics | None = None,
        trace: TraceWriter | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.settings = settings
        self.controller = controller
        self.max_gamma = max_gamma
        self.adaptive = bool(getattr(settings, "adaptive_speculation", True))
        self.mode = str(getattr(settings, "adaptive_gamma0_mode", "sticky"))
        refill = getattr(settings, "refill_batch", None)
        self.refill_batch = int(refill()) if callable(refill) else 1
        self.token_budget = int(scheduler.max_num_scheduled_tokens)
        self.metrics = metrics
        self.trace = trace
        self.failed = False
        self.step = 0
        self.last_decided = max_gamma  # drafts made before the first decision use max K
        self._decided: int | None = None
        self._records: dict[int, _StepRecord] = {}
        self._last_update_t: float | None = None
        self._idle = True
        self._hold_steps = 0
        self._held = False
        self._observed = 0
        self._arms_published = False
        # sticky gamma 0: requests whose draft KV has holes (drafter skipped on their step),
        # and the cohort whose lifetime pins gamma at 0.
        self.tainted: set[str] = set()
        self.cohort: set[str] = set()
        self.closed = False

    # ---- decision ---------------------------------------------------------------------
    def _fallback(self, where: str) -> None:
        """Switch to the fixed upper bound for good; called inside the ``except`` block."""
        if not self.failed:
            exc = sys.exc_info()[1]
            logger.error(
                "vSpec: controller.%s raised %s: %s; falling back to the fixed upper bound "
                "gamma=%d for the rest of this run", where, type(exc).__name__, exc,
                self.max_gamma,
            )
            logger.debug("vSpec: controller failure traceback", exc_info=True)
            self.failed = True
            if self.metrics is not None:
                self.metrics.fallbacks.inc()

    def decide(self, batch_size: int) -> int:
        """The gamma for this step (called by the scheduler through :class:`GammaLookup`)."""
        if self.mode == "sticky" and self._pinned():
            # A sticky zero holds for the cohort's lifetime whatever the controller would
            # say, so it is not asked (its feedback still arrives, with next_gamma=0).
            self._decided = 0
            return 0
        gamma = self.max_gamma
        if not self.failed:
            try:
                gamma = int(self.controller.decide(batch_size, self.token_budget))
            except Exception:
                self._fallback("decide")
                gamma = self.max_gamma
        gamma = max(0, min(gamma, self.max_gamma))
        self._decided = gamma
        return gamma

    def _settled(self) -> bool:
        """True when a gamma-0 decision is the controller's considered choice.

        A sticky zero ends speculation for the whole running cohort, so zeros the controller
        picks while still exploring (warm-up, arm sweep) run as sync zeros instead: K=0 with
        the drafter's KV kept in step, so the cohort can speculate again. Controllers without
        a ``phase`` (profile, fixed) are always settled.
        """
        return not self.failed and getattr(self.controller, "phase", "exploit") == "exploit"

    def _pinned(self) -> bool:
        return bool(self.cohort)

    def _forget_finished(self) -> None:
        """Drop requests that finished since the last schedule from the sticky sets.

        Every finished request passes through the scheduler's ``_free_request``, which records
        it in ``finished_req_ids`` until the next ``schedule()`` clears it; reading that set
        here is O(finished) instead of a scan of the cohort every step."""
        done = self.scheduler.finished_req_ids
        if done:
            self.cohort -= done
            self.tainted -= done

    # ---- schedule ---------------------------------------------------------------------
    def before_schedule(self) -> Callable[[], None]:
        """Refill hold and sticky draft discard; returns the undo for the hold."""
        self._decided = None
        sched = self.scheduler
        if self.tainted:
            self._forget_finished()
            for rid in self.tainted:
                # A tainted request's draft KV has holes: do not verify its drafts.
                request = sched.requests.get(rid)
                if request is not None and request.spec_token_ids:
                    request.spec_token_ids = []
        self._held = False
        waiting = len(sched.waiting)
        if not (self.adaptive and self.refill_batch > 1 and waiting and sched.running):
            self._hold_steps = 0
            return _noop
        running = len(sched.running) + int(getattr(sched, "num_waiting_for_streaming_input", 0))
        free = sched.max_num_active_reqs - running
        if free >= min(self.refill_batch, waiting) or self._hold_steps >= REFILL_MAX_HOLD_STEPS:
            self._hold_steps = 0
            return _noop
        self._hold_steps += 1
        self._held = True
        if self.metrics is not None:
            self.metrics.refill_holds.inc()
        saved = sched.max_num_active_reqs
        sched.max_num_active_reqs = 0  # the WAITING loop admits nobody this step

        def restore() -> None:
            sched.max_num_active_reqs = saved

        return restore

    def after_schedule(self, out: Any) -> None:
        """Record the decision, mark sticky skips, publish the chosen gamma."""
        num_sched: dict[str, int] = out.num_scheduled_tokens
        now = time.monotonic()
        if not num_sched:
            return
        decided = self._decided if self._decided is not None else out.num_spec_tokens_to_schedule
        skip = (
            self.adaptive
            and self.mode == "sticky"
            and decided == 0
            and (bool(self.cohort) or self._settled())
        )
        if skip:
            setattr(out, SKIP_ATTR, True)
            self.tainted.update(num_sched)
            if not self.cohort:
                self.cohort = set(num_sched)
        spec = out.scheduled_spec_decode_tokens
        # Every request scheduled 1 + its drafts (no prefill chunk) <=> the totals agree, as
        # no request is ever scheduled fewer tokens than that.
        steady = not out.scheduled_new_reqs and out.total_num_scheduled_tokens == len(
            num_sched
        ) + sum(len(t) for t in spec.values())
        self._records[id(out)] = _StepRecord(
            t_sched=now,
            decided=decided,
            verified=self.last_decided,
            admitted=len(out.scheduled_new_reqs),
            held=self._held,
            skip=skip,
            steady=steady,
            waiting=len(self.scheduler.waiting),
        )
        self.last_decided = decided
        if self.metrics is not None:
            self.metrics.observe_decision(decided)

    # ---- feedback ---------------------------------------------------------------------
    def on_update(self, out: Any, runner_output: Any) -> Callable[[], None]:
        """Build the step's feedback before vLLM consumes the output; returns the finisher
        to call after ``update_from_output`` ran (observe, metrics, trace)."""
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
        drafted, accepted, committed = _step_counts(out, runner_output)
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
            )

        def finish() -> None:
            # has_requests() stays true for one more step (finished ids to report), so it
            # would never see the engine idle; the unfinished count does.
            self._idle = not self.scheduler.has_unfinished_requests()
            self.step += 1
            if feedback is not None and not self.failed:
                try:
                    self.controller.observe(feedback)
                except Exception:
                    self._fallback("observe")
            if self.metrics is not None:
                self.metrics.observe_step(drafted, accepted, committed)
                self._observed += 1
                if (self._idle or self._observed % METRICS_FLUSH_EVERY == 1
                        or (self._observed <= METRICS_FLUSH_EVERY and not self._arms_published)):
                    self._flush_metrics()
            if self.trace is not None:
                n_d, n_a = sum(drafted), sum(accepted)
                self.trace.write(
                    {
                        "t": time.time(),
                        "step": self.step,
                        "batch": len(drafted),
                        "gamma": record.verified,
                        "decided": record.decided,
                        "drafted": n_d,
                        "accepted": n_a,
                        "committed": decode_committed,
                        "tokens": committed,
                        "interval_s": round(interval, 9),
                        "reward": round(decode_committed / interval, 6),
                        "steady": record.steady,
                        "admitted": record.admitted,
                        "waiting": record.waiting,
                        "held": record.held,
                        "skip": record.skip,
                        "fallback": self.failed,
                    }
                )
                if self._idle:
                    self.trace.push()

        return finish

    def _flush_metrics(self) -> None:
        """Push buffered step metrics and the controller's per-arm estimates."""
        if self.metrics is None:
            return
        self.metrics.flush()
        if self.failed:
            return
        try:
            rewards = arm_rewards(self.controller.snapshot())
            if rewards:
                # The snapshot describes the last batch-size bucket, which may not be measured
                # yet (the tail of a run): the gauges then keep their last values.
                self.metrics.observe_arms(rewards)
                self._arms_published = True
        except Exception:
            logger.debug("vSpec: controller snapshot unavailable for metrics", exc_info=True)

    def close(self) -> None:
        """Flush the trace (scheduler shutdown). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._flush_metrics()
        if self.trace is not None:
            self.trace.close()


def _noop() -> None:
    return None


def _step_counts(
    out: Any, runner_output: Any
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Per decoding request drafted and accepted counts, and all tokens the step committed.

    A request is decoding when it was scheduled exactly 1 + its drafts; partial prefill
    chunks and aborted requests sampled nothing and are left out, as is a request whose
    prefill completed in this step (it committed its first token, counted in the total)."""
    sampled = runner_output.sampled_token_ids
    index = runner_output.req_id_to_index
    spec = out.scheduled_spec_decode_tokens
    n_sampled = len(sampled) if sampled else 0
    committed = 0
    invalid = out.num_invalid_spec_tokens or {}
    drafted: list[int] = []
    accepted: list[int] = []
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
    return tuple(drafted), tuple(accepted), committed


# ---- attaching to a Scheduler -----------------------------------------------------------
def attach(scheduler: Any, settings: Any) -> SchedulerHook | None:
    """Attach a hook to a freshly built Scheduler when speculation is configured."""
    spec = scheduler.vllm_config.speculative_config
    max_gamma = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    if spec is None or max_gamma <= 0:
        logger.info("vSpec: no speculative decoding configured; scheduler left unchanged")
        return None
    method = str(getattr(spec, "method", ""))
    if method not in SUPPORTED_METHODS:
        raise VSpecHostError(
            f"vSpec cannot drive gamma per step for speculative method '{method}': its "
            f"proposer does not draft a per-step K. Use one of "
            f"{', '.join(sorted(SUPPORTED_METHODS))}, or unset HUST_VSPEC_ENABLED."
        )
    for attr in ("dynamic_sd_lookup", "max_num_active_reqs", "max_num_scheduled_tokens",
                 "requests", "waiting", "running", "finished_req_ids"):
        if not hasattr(scheduler, attr):
            raise VSpecHostError(
                f"vSpec: {type(scheduler).__module__}.{type(scheduler).__qualname__} has no "
                f"attribute '{attr}' (host not supported; run the doctor)"
            )
    controller = controller_factory.make_controller(settings, max_gamma)
    trace_path = getattr(settings, "adaptive_trace", None)
    trace = None
    if trace_path:
        fingerprint = settings.fingerprint() if hasattr(settings, "fingerprint") else ""
        trace = TraceWriter(trace_path, header=run_header(fingerprint))
    hook = SchedulerHook(
        scheduler, settings, controller, max_gamma, metrics=get_metrics(), trace=trace
    )
    if hook.adaptive:
        if scheduler.dynamic_sd_lookup is not None:
            logger.warning(
                "vSpec: replacing the configured num_speculative_tokens_per_batch_size "
                "schedule with the adaptive controller"
            )
        size = int(getattr(scheduler, "max_num_running_reqs", 0)) + 1
        scheduler.dynamic_sd_lookup = GammaLookup(hook, size)
    setattr(scheduler, HOOK_ATTR, hook)
    logger.info(
        "vSpec: scheduler hook active (method=%s, max gamma=%d, adaptive=%s, gamma0=%s, "
        "refill=%d, trace=%s)", method, max_gamma, hook.adaptive, hook.mode,
        hook.refill_batch, trace_path,
    )
    return hook


def hook_of(scheduler: Any) -> SchedulerHook | None:
    """The hook attached to ``scheduler`` (or None)."""
    return getattr(scheduler, HOOK_ATTR, None)


# ---- wrappers ---------------------------------------------------------------------------
def _make_init_wrapper(get_settings: Callable[[], Any]) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            orig(self, *args, **kwargs)
            attach(self, get_settings())

        return __init__

    return make


def _make_schedule_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = getattr(self, HOOK_ATTR, None)
        if hook is None:
            return orig(self, *args, **kwargs)
        restore = hook.before_schedule()
        try:
            out = orig(self, *args, **kwargs)
        finally:
            restore()
        hook.after_schedule(out)
        return out

    return schedule


def _make_update_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        hook = getattr(self, HOOK_ATTR, None)
        if hook is None:
            return orig(self, scheduler_output, model_runner_output)
        finish = hook.on_update(scheduler_output, model_runner_output)
        result = orig(self, scheduler_output, model_runner_output)
        finish()
        return result

    return update_from_output


def _make_shutdown_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def shutdown(self: Any) -> Any:
        hook = getattr(self, HOOK_ATTR, None)
        if hook is not None:
            hook.close()
        return orig(self)

    return shutdown


def _make_engine_shutdown_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        # EngineCore tears the executor down before the scheduler; in vLLM's default abort
        # mode the process manager may kill the process during that, so the trace is closed
        # first, while nothing can be lost yet.
        hook = getattr(getattr(self, "scheduler", None), HOOK_ATTR, None)
        if hook is not None:
            hook.close()
        return orig(self, *args, **kwargs)

    return shutdown


def _skipped_drafts(runner: Any, sampled_token_ids: Any) -> Any:
    """What ``propose_draft_token_ids`` returns when the drafter is skipped: no drafts.

    Mirrors the runner's own "input does not fit in the drafter" branch so async bookkeeping
    (valid sampled-token counts) and data-parallel lockstep stay intact.
    """
    if isinstance(sampled_token_ids, list):
        return [[] for _ in sampled_token_ids]
    import torch

    drafter = runner.drafter
    spec_config = runner.speculative_config
    if (
        getattr(runner, "valid_sampled_token_count_event", None) is not None
        and not spec_config.disable_padded_drafter_batch
        and hasattr(drafter, "prepare_next_token_ids_padded")
    ):
        next_ids, counts = drafter.prepare_next_token_ids_padded(
            sampled_token_ids, runner.requests, runner.input_batch,
            runner.discard_request_mask.gpu,
        )
        runner._copy_valid_sampled_token_count(next_ids, counts)
    if runner.parallel_config.data_parallel_size > 1 and hasattr(drafter, "dummy_run"):
        drafter.dummy_run(num_tokens=1)
    return torch.empty(
        (sampled_token_ids.shape[0], 0), dtype=torch.int64, device=sampled_token_ids.device
    )


def _make_propose_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def propose_draft_token_ids(
        self: Any, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if getattr(scheduler_output, SKIP_ATTR, False):
            return _skipped_drafts(self, sampled_token_ids)
        return orig(self, scheduler_output, sampled_token_ids, *args, **kwargs)

    return propose_draft_token_ids


def install(patcher: Patcher, get_settings: Callable[[], Any]) -> None:
    """Apply every upstream-vLLM patch (the one list of them)."""
    scheduler_cls = resolve(*SCHEDULER)
    runner_cls = resolve(*MODEL_RUNNER)
    patcher.wrap(scheduler_cls, "__init__", _make_init_wrapper(get_settings))
    patcher.wrap(scheduler_cls, "schedule", _make_schedule_wrapper)
    patcher.wrap(scheduler_cls, "update_from_output", _make_update_wrapper)
    patcher.wrap(scheduler_cls, "shutdown", _make_shutdown_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "shutdown", _make_engine_shutdown_wrapper)
    patcher.wrap(runner_cls, "propose_draft_token_ids", _make_propose_wrapper)

    def fast_on() -> bool:
        return bool(getattr(get_settings(), "adaptive_zero_fast_path", True))

    patcher.wrap(runner_cls, "execute_model", fast_path.make_execute_wrapper(SKIP_ATTR, fast_on))
    patcher.wrap(runner_cls, "sample_tokens", fast_path.make_sample_wrapper)


__all__ = [
    "HOOK_ATTR",
    "REFILL_MAX_HOLD_STEPS",
    "SKIP_ATTR",
    "SUPPORTED_METHODS",
    "GammaLookup",
    "SchedulerHook",
    "VSpecHostError",
    "attach",
    "hook_of",
    "install",
]
