"""Acceptance modes on vllm-ascend's rejection path.

``AscendRejectionSampler.forward`` calls the module-level ``rejection_sample`` of
``vllm_ascend.sample.rejection_sampler`` (which picks the triton-ascend kernel or the pytorch
fallback). Strict greedy acceptance is the host's own behaviour, so in strict mode nothing is
patched. For relaxed modes that function is wrapped: all-greedy batches with full-vocabulary
target logits (a plain tensor, or ``(logits, None)``) go through the host-independent
:func:`greedy_accept`; anything else (sampling, mixed batches, vocab-sharded reduce-sample
logits) keeps the host's exact path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from vllm_hust_vspec.backends.acceptance import AcceptanceParams, greedy_accept
from vllm_hust_vspec.host.patching import Patcher

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")


def _output_lens(sampling_metadata: Any, batch: int) -> list[int] | None:
    tokens = getattr(sampling_metadata, "output_token_ids", None)
    if not tokens or len(tokens) != batch:
        return None
    return [len(t) for t in tokens]


def full_vocab_logits(target_logits_or_tuple: Any) -> Any:
    """The target logits when they cover the whole vocabulary, else None.

    vllm-ascend's ``apply_sampling_constraints`` hands ``rejection_sample`` a plain tensor on
    some lines and ``(logits, None)`` for all-greedy batches on others (vLLM-Ascend-HUST);
    ``(values, indices)`` is the top-k selection of the reduce-sample path, not full logits.
    """
    if isinstance(target_logits_or_tuple, tuple):
        logits, indices = target_logits_or_tuple
        return logits if indices is None else None
    return target_logits_or_tuple


class RelaxedAcceptanceError(RuntimeError):
    """Relaxed acceptance was asked for on a path it cannot be applied to exactly."""


def make_rejection_wrapper(
    original: Callable[..., Any],
    params: Callable[[], AcceptanceParams],
    vocab_sharded: Callable[[], bool] = lambda: False,
) -> Callable[..., Any]:
    """Wrap ``rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len,
    cu_num_draft_tokens, draft_probs, target_logits_or_tuple, bonus_token_ids,
    sampling_metadata, ...)``."""

    def rejection_sample(
        draft_token_ids: Any, num_draft_tokens: Any, max_spec_len: int,
        cu_num_draft_tokens: Any, draft_probs: Any, target_logits_or_tuple: Any,
        bonus_token_ids: Any, sampling_metadata: Any, *args: Any, **kwargs: Any,
    ) -> Any:
        p = params()
        logits = full_vocab_logits(target_logits_or_tuple)
        relaxed_ok = (
            not p.strict
            and getattr(sampling_metadata, "all_greedy", False)
            and logits is not None
        )
        if relaxed_ok and vocab_sharded():
            raise RelaxedAcceptanceError(
                "vSpec: relaxed acceptance needs full-vocabulary target logits, but "
                "vllm-ascend's enable_reduce_sample shards them over TP ranks; turn off "
                "enable_reduce_sample (additional_config) or the relaxed acceptance options"
            )
        if not relaxed_ok:
            return original(
                draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                draft_probs, target_logits_or_tuple, bonus_token_ids, sampling_metadata,
                *args, **kwargs,
            )
        return greedy_accept(
            draft_token_ids, list(num_draft_tokens), logits, bonus_token_ids,
            p, max_spec_len=max_spec_len,
            num_output_tokens=_output_lens(sampling_metadata, len(num_draft_tokens)),
        )

    return rejection_sample


def install_rejection(
    patcher: Patcher, module: Any, params: Callable[[], AcceptanceParams]
) -> bool:
    """Wrap ``module.rejection_sample`` when relaxed acceptance is configured.

    Returns True when patched. Strict (the default) patches nothing: the host's greedy path
    already is strict acceptance, bit for bit.
    """
    if params().strict:
        return False
    def sharded() -> bool:
        get_cfg = getattr(module, "get_ascend_config", None)
        try:
            return bool(get_cfg and get_cfg().enable_reduce_sample)
        except Exception:  # noqa: BLE001 - config not initialised: assume full logits
            return False

    patcher.wrap(
        module, "rejection_sample", lambda orig: make_rejection_wrapper(orig, params, sharded)
    )
    logger.warning(
        "vSpec: relaxed acceptance is ON for all-greedy batches on the Ascend rejection "
        "sampler (%s); their outputs differ from target-only decoding. Batches with sampled "
        "requests keep the host's rejection sampling", params(),
    )
    return True


__all__ = [
    "RelaxedAcceptanceError",
    "full_vocab_logits",
    "install_rejection",
    "make_rejection_wrapper",
]
