"""Relaxed acceptance modes on upstream vLLM's rejection path (worker process).

``RejectionSampler.forward`` (``vllm/v1/sample/rejection_sampler.py``) calls the module-level
``rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
draft_probs, target_logits, bonus_token_ids, sampling_metadata, ...)``. Strict greedy
acceptance is vLLM's own behaviour, so in strict mode **nothing is patched**. With a relaxed
mode configured two functions are wrapped:

* ``GPUModelRunner._sample``: publishes, for the duration of the call, the acceptance
  parameters (settings + the target's EOS ids when protected) and each request's generated
  token count (for ``after_tokens``) — the sampling metadata only carries output tokens when
  penalties need them;
* ``rejection_sample``: greedy requests get :func:`greedy_accept`'s relaxed result; requests
  with temperature > 0 keep vLLM's exact rejection sampling (in a mixed batch vLLM's output is
  computed first and only the greedy rows are replaced). Synthetic acceptance mode and calls
  outside a runner's ``_sample`` (warm-up, dummy runs) go to vLLM untouched.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.backends.acceptance import (
    STRICT,
    AcceptanceParams,
    greedy_accept,
    params_from_settings,
)
from vllm_hust_vspec.host.abi.capabilities import MODEL_RUNNER
from vllm_hust_vspec.host.patching import Patcher, resolve

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

REJECTION_MODULE = "vllm.v1.sample.rejection_sampler"


@dataclass(frozen=True)
class VerifyContext:
    """What one verification step needs beyond rejection_sample's own arguments."""

    params: AcceptanceParams
    num_output_tokens: tuple[int, ...] | None


_CONTEXT: contextvars.ContextVar[VerifyContext | None] = contextvars.ContextVar(
    "vspec_verify", default=None
)


def acceptance_params(settings: Settings | None) -> AcceptanceParams:
    """The configured acceptance parameters (STRICT without settings)."""
    return STRICT if settings is None else params_from_settings(settings)


def eos_token_ids(model_config: Any) -> list[int]:
    """The target's EOS id(s) from its HF config (int or list; absent: none)."""
    ids: list[int] = []
    for cfg in (getattr(model_config, "hf_text_config", None),
                getattr(model_config, "hf_config", None)):
        value = getattr(cfg, "eos_token_id", None)
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, (list, tuple)):
            ids.extend(int(v) for v in value)
    return sorted(set(ids))


def _output_counts(runner: Any, batch: int) -> tuple[int, ...] | None:
    try:
        rows = runner.input_batch.req_output_token_ids[:batch]
    except AttributeError:
        return None
    if len(rows) != batch:
        return None
    return tuple(len(r) if r is not None else 0 for r in rows)


def _make_sample_wrapper(
    get_params: Callable[[], AcceptanceParams], protect_eos: Callable[[], bool]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def _sample(self: Any, logits: Any, spec_decode_metadata: Any, *args: Any,
                    **kwargs: Any) -> Any:
            params = get_params()
            if spec_decode_metadata is None or params.strict:
                return orig(self, logits, spec_decode_metadata, *args, **kwargs)
            if protect_eos():
                params = params.with_protected(eos_token_ids(getattr(self, "model_config", None)))
            batch = len(spec_decode_metadata.num_draft_tokens)
            token = _CONTEXT.set(VerifyContext(params, _output_counts(self, batch)))
            try:
                return orig(self, logits, spec_decode_metadata, *args, **kwargs)
            finally:
                _CONTEXT.reset(token)

        return _sample

    return make


def _greedy_rows(sampling_metadata: Any, batch: int) -> Any:
    temperature = getattr(sampling_metadata, "temperature", None)
    if temperature is None or temperature.shape[0] < batch:
        return None
    return temperature[:batch] == 0


def make_rejection_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap upstream ``rejection_sample`` (signature kept)."""

    def rejection_sample(
        draft_token_ids: Any, num_draft_tokens: Sequence[int], max_spec_len: int,
        cu_num_draft_tokens: Any, draft_probs: Any, target_logits: Any,
        bonus_token_ids: Any, sampling_metadata: Any, *args: Any, **kwargs: Any,
    ) -> Any:
        ctx = _CONTEXT.get()
        call = (draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
                draft_probs, target_logits, bonus_token_ids, sampling_metadata)
        if (
            ctx is None
            or ctx.params.strict
            or kwargs.get("synthetic_mode", False)
            or (args and bool(args[0]))  # synthetic_mode passed positionally
            or getattr(sampling_metadata, "all_random", False)
        ):
            return original(*call, *args, **kwargs)
        counts = ctx.num_output_tokens
        if counts is not None and len(counts) != len(num_draft_tokens):
            counts = None
        relaxed = greedy_accept(
            draft_token_ids, list(num_draft_tokens), target_logits, bonus_token_ids,
            ctx.params, max_spec_len=max_spec_len, num_output_tokens=counts,
        )
        if getattr(sampling_metadata, "all_greedy", False):
            return relaxed
        # Mixed batch: vLLM's exact result for sampled rows, relaxed rows for greedy ones.
        out = original(*call, *args, **kwargs)
        rows = _greedy_rows(sampling_metadata, len(num_draft_tokens))
        if rows is None:
            return out
        out[rows] = relaxed.to(out.device, out.dtype)[rows]
        return out

    return rejection_sample


def install_acceptance(patcher: Patcher, get_settings: Callable[[], Settings]) -> bool:
    """Patch the upstream rejection path when a relaxed mode is configured.

    Returns True when patched; strict mode (the default) patches nothing.
    """
    params = acceptance_params(get_settings())
    if params.strict:
        return False

    def get_params() -> AcceptanceParams:
        return acceptance_params(get_settings())

    def protect_eos() -> bool:
        return bool(get_settings().acceptance_protect_eos)

    import importlib

    module = importlib.import_module(REJECTION_MODULE)
    runner_cls = resolve(*MODEL_RUNNER)
    patcher.wrap(runner_cls, "_sample", _make_sample_wrapper(get_params, protect_eos))
    patcher.wrap(module, "rejection_sample", make_rejection_wrapper)
    logger.warning(
        "vSpec: RELAXED ACCEPTANCE is ON (%s): greedy outputs WILL DIFFER from target-only "
        "decoding; sampling requests (temperature > 0) keep exact rejection sampling",
        describe(params),
    )
    return True


def describe(params: AcceptanceParams) -> str:
    """A short human description of the relaxed modes in force."""
    parts = []
    if params.topk is not None:
        pos, after = params.limits("topk")
        parts.append(f"top-{params.topk} from position {pos} after {after} tokens")
    if params.margin is not None:
        pos, after = params.limits("margin")
        parts.append(f"margin {params.margin} ({params.margin_unit}) from position {pos} after"
                     f" {after} tokens")
    if params.forced_length is not None:
        parts.append(f"FORCED acceptance length {params.forced_length} (measurement only)")
    if params.protected_token_ids:
        parts.append(f"protected ids {sorted(params.protected_token_ids)}")
    return "; ".join(parts) or "strict"


__all__ = [
    "REJECTION_MODULE",
    "VerifyContext",
    "acceptance_params",
    "describe",
    "eos_token_ids",
    "install_acceptance",
    "make_rejection_wrapper",
]
