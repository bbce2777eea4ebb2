"""Zero-draft fast path: a sticky gamma-0 step runs exactly like a target-only step.

A vLLM engine configured for speculation takes the speculative path on every step, even when
no request carries a draft: ``_prepare_inputs`` builds spec-decode metadata
(``use_spec_decode = self.speculative_config is not None``), the logits go through the
rejection sampler, and ``sample_tokens`` enters the drafting block. On the CPU test host that
costs a quarter of a tiny model's step, which is what kept a speculative engine whose
controller had switched speculation off (gamma 0, drafter skipped) below target-only speed.

When the scheduler hook has decided a sticky zero for this step (``SKIP_ATTR`` on the output: the
drafter will not run after it) and the step verifies no drafts, there is nothing speculative left to
do, so the runner sees no speculative config for ``execute_model`` and the matching
``sample_tokens``: the plain sampler, plain decode attention metadata, no drafting block. The swap
is per runner, restored in ``finally``, and the two calls are paired by a flag on the runner. (The
engine side of the same path is in host/engine/scheduler.py: after such a step
``EngineCore.post_step`` neither asks the worker for drafts, a round trip to the worker process
when serving, nor stores any.) Steps that are not eligible are untouched:

* async scheduling (draft placeholders are in flight) or pipeline parallelism;
* hybrid / recurrent models (vLLM keeps zero-draft decode rows on the speculative path for
  them on purpose: some recurrent backends read the previous state at a spec-only offset);
* any request with a draft to verify in this step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Set on the runner between an eligible execute_model and its sample_tokens.
PLAIN_ATTR = "_vspec_plain_step"
# Steps that took the fast path, per runner (tests and the trace read it).
COUNT_ATTR = "_vspec_plain_steps"


def eligible(runner: Any, scheduler_output: Any, skip_attr: str) -> bool:
    """True when this step can run as a plain target step (see the module docstring)."""
    if not getattr(scheduler_output, skip_attr, False):
        return False
    if runner.speculative_config is None or getattr(runner, "use_async_scheduling", False):
        return False
    parallel = getattr(runner, "parallel_config", None)
    if parallel is not None and getattr(parallel, "pipeline_parallel_size", 1) != 1:
        return False
    model_config = runner.model_config
    if getattr(model_config, "is_hybrid", False) or getattr(model_config, "has_inner_state",
                                                            False):
        return False
    drafts = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    return not any(drafts.values())


def _hidden_spec(orig: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    saved = runner.speculative_config
    runner.speculative_config = None
    try:
        return orig(runner, *args, **kwargs)
    finally:
        runner.speculative_config = saved


def make_execute_wrapper(
    skip_attr: str, enabled: Callable[[], bool]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrapper factory for ``GPUModelRunner.execute_model`` (``enabled`` is read per step:
    ``adaptive_gamma0_mode`` sticky, not sticky-spec)."""

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            if not (enabled() and eligible(self, scheduler_output, skip_attr)):
                setattr(self, PLAIN_ATTR, False)
                return orig(self, scheduler_output, *args, **kwargs)
            setattr(self, PLAIN_ATTR, True)
            setattr(self, COUNT_ATTR, getattr(self, COUNT_ATTR, 0) + 1)
            try:
                return _hidden_spec(orig, self, scheduler_output, *args, **kwargs)
            except BaseException:
                setattr(self, PLAIN_ATTR, False)
                raise

        return execute_model

    return wrap


def make_sample_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Wrapper for ``GPUModelRunner.sample_tokens``: pairs with an eligible execute_model."""

    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, PLAIN_ATTR, False):
            return orig(self, *args, **kwargs)
        setattr(self, PLAIN_ATTR, False)
        return _hidden_spec(orig, self, *args, **kwargs)

    return sample_tokens
