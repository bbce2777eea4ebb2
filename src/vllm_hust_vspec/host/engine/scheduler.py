"""The per-step gamma hook in vLLM's Scheduler and EngineCore (EngineCore process).

The workers' side (the drafter skip, the K channel) is host/worker/v1/runner.py.

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

import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host import startup_faults
from vllm_hust_vspec.host.abi import runners
from vllm_hust_vspec.host.abi.capabilities import (
    ENGINE_CORE,
    ENGINE_CORE_PROC,
    SCHEDULER,
)
from vllm_hust_vspec.host.engine import controller_factory, dp_agreement
from vllm_hust_vspec.host.engine.cost_prior import calibration, dummy_batches
from vllm_hust_vspec.host.engine.cost_prior.persisted import CostState, fingerprint_of
from vllm_hust_vspec.host.engine.hook import GammaLookup, SchedulerHook, VSpecHostError
from vllm_hust_vspec.host.engine.metrics import get_metrics
from vllm_hust_vspec.host.patching import Patcher, host_function, is_patched, resolve
from vllm_hust_vspec.host.wire import is_declared

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

HOOK_ATTR = "_vspec_hook"
# Methods whose proposer drafts exactly the K it is given. suffix and the GPU n-gram proposer
# (ngram_gpu) assert K == configured K and custom_class ignores it, so none of them can be
# driven per step; medusa is gone in vLLM 0.33.
SUPPORTED_METHODS = frozenset({"draft_model", "eagle", "eagle3", "mtp", "ngram"})


# ---- attaching to a Scheduler -----------------------------------------------------------
def attach(scheduler: Any, settings: Settings) -> SchedulerHook | None:
    """Attach a hook to a freshly built Scheduler when speculation is configured.

    What the hook reads of the scheduler is checked once per process by the requirement
    table (host/abi/capabilities.py, the doctor's checks), not here."""
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
    runner_plan = runners.plan(settings, runners.runner_of(scheduler.vllm_config),
                               scheduler.vllm_config)
    runner_plan.raise_errors()
    for warning in runner_plan.warnings:
        logger.warning("vSpec: %s", warning)
    settings = runner_plan.settings
    if settings.adaptive_speculation and getattr(scheduler, "spec_rhythm_policy", None):
        logger.info(
            "vSpec: SpecRhythm (speculative_config.spec_rhythm) is active: vSpec picks each "
            "step's gamma, SpecRhythm may lower it to its largest per-request budget and cuts "
            "each request's drafts to its own; the controller learns from the gamma that runs")
    state = prior = None
    profiled = dummy_batches.take(scheduler.vllm_config)
    if settings.adaptive_speculation and settings.adaptive_state_path:
        state = CostState(settings.adaptive_state_path,
                          fingerprint_of(scheduler.vllm_config, max_gamma))
        prior = state.load()
    # real steps (an earlier run's, or this engine's calibration once it is built) beat
    # dummy batches of this one
    calibrate = (settings.startup_calibration() and prior is None
                 and controller_factory.takes_cost_prior(settings))
    if calibrate and (why := calibration.blocker(settings, scheduler)) is not None:
        logger.warning("vSpec: no start-up calibration: %s; the controller starts from the "
                       "dummy-batch profile", why)
        calibrate = False
    if prior is None and settings.adaptive_speculation:
        prior = profiled
    controller = controller_factory.make_controller(settings, max_gamma, cost_prior=prior)
    with startup_faults.stage("vspec_ metrics"):
        metrics = get_metrics()
    hook = SchedulerHook(
        scheduler, settings, controller, max_gamma, metrics=metrics, cost_state=state,
        cost_prior=prior,
    )
    # with a calibration to come, the trace opens after it, naming the prior served from
    if not calibrate:
        with startup_faults.stage("adaptive trace"):
            hook.telemetry.trace = hook.open_trace(prior)
    hook.calibration_pending = calibrate
    hook.startup_profile = profiled
    if hook.adaptive and not hasattr(scheduler, "dynamic_sd_lookup"):
        # No per-step K channel in this host (the vLLM-HUST core): the hook carries its own.
        hook.own_channel = True
    elif hook.adaptive:
        if scheduler.dynamic_sd_lookup is not None and not is_declared(spec):
            logger.warning(
                "vSpec: replacing the configured num_speculative_tokens_per_batch_size "
                "schedule with the adaptive controller"
            )
        size = int(getattr(scheduler, "max_num_running_reqs", 0)) + 1
        scheduler.dynamic_sd_lookup = GammaLookup(hook, size)
    for label in wrap_overrides(type(scheduler)):
        logger.info("vSpec: %s overrides the base scheduler's; the per-step hook wraps it too",
                    label)
    setattr(scheduler, HOOK_ATTR, hook)
    logger.info(
        "vSpec: scheduler hook active (method=%s, max gamma=%d, adaptive=%s, gamma0=%s, "
        "refill=%d, runner=%s, K channel=%s, trace=%s)", method, max_gamma, hook.adaptive,
        hook.mode, hook.refill.batch, runner_plan.runner,
        "vSpec's own" if hook.own_channel else "vLLM's", settings.adaptive_trace,
    )
    return hook


def calibrate_engine(core: Any) -> None:
    """Run the start-up calibration of an engine whose hook asked for one (attach), then
    serve from its prior: a fresh controller, and the trace opened naming it. An engine
    whose calibration timed nothing keeps the controller it was built with."""
    hook = hook_of(getattr(core, "scheduler", None))
    if hook is None or not hook.calibration_pending:
        return
    hook.calibration_pending = False
    with startup_faults.stage("start-up calibration"):
        prior = calibration.calibrate(core, hook, dummy=hook.startup_profile)
        controller = hook.controller
        if prior is not None:
            controller = controller_factory.make_controller(hook.settings, hook.max_gamma,
                                                            cost_prior=prior)
        else:
            prior = hook.cost_prior
    with startup_faults.stage("adaptive trace"):
        trace = hook.open_trace(prior)
    hook.restart(controller, prior, trace)


def attach_agreement(core: Any) -> None:
    """Join a lockstep data-parallel engine's hook to its peers' (one gamma per step,
    host/engine/dp_agreement.py). Every rank runs this before its loop's first step; building
    the group waits for all of them."""
    hook = hook_of(getattr(core, "scheduler", None))
    if hook is None or not hook.adaptive or hook.agreement is not None:
        return
    with startup_faults.stage("DP gamma agreement"):
        hook.agreement = dp_agreement.for_engine(core, hook.max_gamma)


def hook_of(scheduler: Any) -> SchedulerHook | None:
    """The hook attached to ``scheduler`` (or None)."""
    return getattr(scheduler, HOOK_ATTR, None)


# ---- wrappers ---------------------------------------------------------------------------
def _make_init_wrapper(
    get_settings: Callable[[], Settings],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            orig(self, *args, **kwargs)
            with startup_faults.stage("scheduler hook"):
                attach(self, get_settings())

        return __init__

    return make


def _make_schedule_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = getattr(self, HOOK_ATTR, None)
        if hook is None or hook.inside.schedule:
            # no hook, or a subclass's wrapped override calling the base's: once per call
            return orig(self, *args, **kwargs)
        hook.inside.schedule = True
        try:
            hook.begin_schedule()
            try:
                out = orig(self, *args, **kwargs)
            finally:
                hook.end_schedule()
        finally:
            hook.inside.schedule = False
        hook.after_schedule(out)
        return out

    return schedule


def _make_update_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        hook = getattr(self, HOOK_ATTR, None)
        if hook is None or hook.inside.update:
            return orig(self, scheduler_output, model_runner_output)
        hook.inside.update = True
        try:
            finish = hook.on_update(scheduler_output, model_runner_output)
            result = orig(self, scheduler_output, model_runner_output)
        finally:
            hook.inside.update = False
        hook.end_update(finish)
        return result

    return update_from_output


def _make_grammar_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def get_grammar_bitmask(self: Any, *args: Any, **kwargs: Any) -> Any:
        # vLLM asks for the grammar bitmask right after it sent the step to the workers: the
        # last step's feedback runs here, in the shadow of their forward.
        hook = getattr(self, HOOK_ATTR, None)
        if hook is not None:
            hook.settle()
        return orig(self, *args, **kwargs)

    return get_grammar_bitmask


# The per-step methods the hook runs around, and their wrapper factories.
_STEP_METHODS: tuple[tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]]], ...] = (
    ("schedule", _make_schedule_wrapper),
    ("update_from_output", _make_update_wrapper),
)
_patcher: Patcher | None = None  # install()'s, for overrides met at attach time


def wrap_overrides(scheduler_cls: type) -> list[str]:
    """Wrap the per-step methods a scheduler subclass overrides (vllm-ascend's recompute,
    profiling-chunk and load-balancing schedulers, any ``--scheduler-cls``): without this
    their ``schedule`` would run without the hook (no sticky bookkeeping, no per-request
    lengths, no refill hold). An override that calls the base method runs the hook once
    (the wrappers are re-entrance guarded). vSpec's own patch records decide whether the
    defining class already has vSpec's layer, so another plugin's wrapper on top of it (one
    without ``__wrapped__``, loaded after vSpec) is not wrapped a second time. Returns
    ``Class.method`` of what it wrapped."""
    wrapped = []
    for name, make in _STEP_METHODS:
        owner = next(c for c in scheduler_cls.__mro__ if name in vars(c))
        for layer in host_function(vars(owner)[name], name)[1]:
            # every plugin has loaded by the time a scheduler is built
            logger.info("vSpec: %s.%s is also wrapped by %s", owner.__qualname__, name,
                        layer.by)
        if is_patched(owner, name):
            continue
        if _patcher is None:
            raise VSpecHostError(
                f"vSpec cannot run its per-step hook around {owner.__qualname__}.{name}: the "
                "scheduler patches are not installed (enable vSpec before vLLM builds engines)")
        _patcher.wrap(owner, name, make)
        wrapped.append(f"{owner.__qualname__}.{name}")
    return wrapped


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


def _make_engine_init_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        # The engine is whole (scheduler, KV cache, prefix hashing) and serves nothing yet.
        calibrate_engine(self)

    return __init__


def _make_busy_loop_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def run_busy_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        # An EngineCore process (vllm serve, LLM with multiprocessing) loads the plugins
        # inside EngineCore.__init__, so the __init__ wrapper never runs there: the engine
        # is calibrated here instead, before its loop reads the first request.
        calibrate_engine(self)
        attach_agreement(self)
        return orig(self, *args, **kwargs)

    return run_busy_loop


def _make_dummy_batch_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def execute_dummy_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        # An idle lockstep rank: it takes part in the step's agreement without a vote and its
        # dummy batch drafts the agreed gamma, so its drafter's collectives pair with the
        # busy ranks'.
        hook = getattr(getattr(self, "scheduler", None), HOOK_ATTR, None)
        agreement = hook.agreement if hook is not None else None
        if agreement is None or not agreement.enabled:
            return orig(self, *args, **kwargs)
        gamma = agreement.agree(None, 0)
        self.model_executor.collective_rpc(dp_agreement.dummy_batch_at, args=(gamma,))
        return None

    return execute_dummy_batch


def _make_post_step_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def post_step(self: Any, model_executed: bool, *args: Any, **kwargs: Any) -> Any:
        # After a sync step vLLM asks the worker for the drafts it made (a round trip to the
        # worker process when serving) and stores them on the requests. After a sticky
        # gamma-0 step the drafter did not run and every request of the step is tainted (the
        # hook voids its drafts before each schedule()), so there is nothing to fetch or
        # store: such a step does no work here that a target-only engine does not.
        hook = getattr(getattr(self, "scheduler", None), HOOK_ATTR, None)
        if hook is not None and hook.take_skipped_step() and model_executed \
                and not self.async_scheduling and self.batch_queue is None:
            return None
        return orig(self, model_executed, *args, **kwargs)

    return post_step


def _make_kv_init_wrapper(
    get_settings: Callable[[], Settings],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def _initialize_kv_caches(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
            out = orig(self, vllm_config, *args, **kwargs)
            # The model is warm and the KV cache allocated; the scheduler is built next.
            settings = get_settings()
            if runners.lockstep_dp(vllm_config):
                # lockstep ranks profile nothing alone (host/abi/runners.py _lockstep_dp)
                settings = runners.plan(settings, runners.runner_of(vllm_config),
                                        vllm_config).settings
            with startup_faults.stage("start-up cost profile"):
                dummy_batches.profile_engine(self.model_executor, vllm_config, settings)
            return out

        return _initialize_kv_caches

    return make


def install(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Patch the EngineCore side: the Scheduler's per-step hook and the engine's start-up
    cost profile, calibration and shutdown."""
    global _patcher
    _patcher = patcher
    scheduler_cls = resolve(*SCHEDULER)
    patcher.wrap(scheduler_cls, "__init__", _make_init_wrapper(get_settings))
    patcher.wrap(scheduler_cls, "schedule", _make_schedule_wrapper)
    patcher.wrap(scheduler_cls, "update_from_output", _make_update_wrapper)
    if hasattr(scheduler_cls, "get_grammar_bitmask"):
        # optional: without it the feedback runs before the next update instead
        patcher.wrap(scheduler_cls, "get_grammar_bitmask", _make_grammar_wrapper)
    patcher.wrap(scheduler_cls, "shutdown", _make_shutdown_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "shutdown", _make_engine_shutdown_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "__init__", _make_engine_init_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE_PROC), "run_busy_loop", _make_busy_loop_wrapper)
    dp_core = getattr(importlib.import_module(dp_agreement.DP_ENGINE_CORE_PROC[0]),
                      dp_agreement.DP_ENGINE_CORE_PROC[1], None)
    if dp_core is not None and "run_busy_loop" in vars(dp_core):
        # the lockstep data-parallel loop is its own (it never calls EngineCoreProc's); a
        # host without it has no lockstep data parallel to agree in
        patcher.wrap(dp_core, "run_busy_loop", _make_busy_loop_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "execute_dummy_batch", _make_dummy_batch_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "post_step", _make_post_step_wrapper)
    patcher.wrap(resolve(*ENGINE_CORE), "_initialize_kv_caches",
                 _make_kv_init_wrapper(get_settings))


__all__ = [
    "HOOK_ATTR",
    "SUPPORTED_METHODS",
    "GammaLookup",
    "SchedulerHook",
    "VSpecHostError",
    "attach",
    "attach_agreement",
    "hook_of",
    "install",
]
