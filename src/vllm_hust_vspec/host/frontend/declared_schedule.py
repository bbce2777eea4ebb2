"""vSpec declares its per-step gamma to vLLM as dynamic speculative decoding.

vLLM sizes its graphs and picks its graph modes from
``SpeculativeConfig.num_speculative_tokens_per_batch_size`` (a batch-size -> K schedule):

* Model Runner V2 captures target decode graphs for every verify width ``1 + K`` and draft
  decode graphs per K for every K the schedule lists (``gpu/cudagraph_utils.py``,
  ``spec_decode/target_dependent_ar/cudagraph_utils.py``); without a schedule it captures
  width ``1 + max K`` only and replays the max-K draft loop for smaller K;
* the V1 runner switches FULL graphs to PIECEWISE, vLLM's own rule for a verify width that
  changes at run time (``VllmConfig._maybe_override_dynamic_sd_cudagraph_mode``), and sizes
  its capture list per width tier;
* data parallel > 1 (and, in 0.33, a V1 method that cannot draft a per-step K) turns the
  schedule off, as ranks choosing different K would deadlock. vSpec keeps its declared
  schedule there (:func:`_make_dp_wrapper`): a dense model's ranks are independent engines,
  and an MoE model's lockstep ranks agree on one gamma per step (host/engine/dp_agreement.py)
  on the V1 runner; on another runner vLLM's rule stays (and vSpec refuses adaptive gamma
  there, host/abi/runners.py).

A vSpec launch with adaptive gamma changes K every step, so it declares a schedule listing
every K from 0 to the upper bound, and vLLM's own rules apply to it as to any dynamic
schedule. The scheduler hook then replaces the schedule's lookup with the controller
(host/engine/scheduler.py), so the batch-size mapping itself never decides anything. It is declared
where vLLM builds the speculative config (``EngineArgs.create_speculative_config``), before
``VllmConfig`` runs those rules; a schedule the user configured is kept (and replaced at the
scheduler with a warning, as before).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.wire import SCHEDULE_FIELD, declared_schedule, is_declared

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

ENGINE_ARGS = ("vllm.engine.arg_utils", "EngineArgs")
VLLM_CONFIG = ("vllm.config.vllm", "VllmConfig")
DP_RULE = "_maybe_disable_dynamic_sd_for_data_parallel"
def wants_declaration(settings: Settings) -> bool:
    """Only adaptive gamma changes K per step (a fixed gamma keeps vLLM's static graphs), and
    only upstream runners read the schedule: vLLM-Ascend's graphs per gamma are its own."""
    from vllm_hust_vspec.host.abi.host_facts import is_ascend_platform

    return bool(settings.adaptive_speculation) and not is_ascend_platform()


def _make_create_wrapper(
    get_settings: Callable[[], Settings],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def create_speculative_config(self: Any, *args: Any, **kwargs: Any) -> Any:
            spec = orig(self, *args, **kwargs)
            if spec is None or not wants_declaration(get_settings()):
                return spec
            max_gamma = int(getattr(spec, "num_speculative_tokens", 0) or 0)
            if max_gamma <= 0 or not hasattr(spec, SCHEDULE_FIELD):
                return spec
            if getattr(spec, SCHEDULE_FIELD) is not None:
                logger.info("vSpec: keeping the configured %s for vLLM's graph sizing; the "
                            "controller decides gamma", SCHEDULE_FIELD)
                return spec
            schedule = declared_schedule(max_gamma, getattr(self, "max_num_seqs", None))
            setattr(spec, SCHEDULE_FIELD, schedule)
            logger.info(
                "vSpec: declared gamma 0..%d to vLLM as a dynamic speculative schedule "
                "(graphs per verify width; the controller decides each step's gamma)",
                max_gamma,
            )
            return spec

        return create_speculative_config

    return make


def _make_dp_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def _maybe_disable_dynamic_sd_for_data_parallel(self: Any, *args: Any, **kwargs: Any) -> Any:
        # vLLM drops every dynamic schedule under data parallel > 1, as its ranks could pick
        # different K in lockstep. A dense model's ranks are independent engines (one vSpec
        # controller each); an MoE model's lockstep ranks agree on one gamma per step on the
        # V1 runner. There the declared schedule stays and graphs keep every verify width.
        spec = self.speculative_config
        model = getattr(self, "model_config", None)
        if spec is None or not is_declared(spec) or model is None:
            return orig(self, *args, **kwargs)
        if not getattr(model, "is_moe", True):
            logger.info("vSpec: keeping the declared gamma schedule under data parallel "
                        "(a dense model's ranks run as independent engines)")
            return None
        if not _builds_v2(self):
            logger.info("vSpec: keeping the declared gamma schedule under data parallel "
                        "(the MoE ranks agree on one gamma per lockstep step)")
            return None
        return orig(self, *args, **kwargs)

    return _maybe_disable_dynamic_sd_for_data_parallel


def _builds_v2(vllm_config: Any) -> bool:
    """True when the engine builds Model Runner V2 (where vSpec does not agree under DP)."""
    try:
        return bool(vllm_config.use_v2_model_runner)
    except AttributeError:
        return False


def install(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Wrap ``EngineArgs.create_speculative_config`` (the front-end process builds it) and,
    where vLLM has it, the rule that drops a dynamic schedule under data parallel."""
    patcher.wrap(resolve(*ENGINE_ARGS), "create_speculative_config",
                 _make_create_wrapper(get_settings))
    config_cls = resolve(*VLLM_CONFIG)
    if hasattr(config_cls, DP_RULE):
        patcher.wrap(config_cls, DP_RULE, _make_dp_wrapper)


__all__ = [
    "ENGINE_ARGS",
    "SCHEDULE_FIELD",
    "declared_schedule",
    "install",
    "is_declared",
    "wants_declaration",
]
