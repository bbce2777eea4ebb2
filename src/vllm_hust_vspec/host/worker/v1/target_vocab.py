"""``--eagle-target-active-vocab-ids PATH`` on upstream vLLM's V1 runner: the target's greedy
argmax over an active vocabulary.

Where the target's logits come from in vLLM 0.32: ``GPUModelRunner.execute_model`` calls
``self.model.compute_logits(sample_hidden_states)``, which for every model with a vLLM LM head
is ``LogitsProcessor.forward`` -> ``LogitsProcessor._get_logits`` (the LM-head multiply, TP
gather, padding slice). The result is the one tensor both the sampler (target-only and bonus
tokens: ``argmax`` for greedy rows) and the rejection sampler (greedy comparison:
``target_logits.argmax(-1)``) consume. So:

* ``GPUModelRunner.initialize_kv_cache`` (after the model loads, before any request; the CPU
  runner's override calls it) attaches, once per runner, a ``TargetHead`` to
  the *target* model's ``logits_processor`` instance and probes ``compute_logits`` once to
  prove the model routes through it (fails closed otherwise: the worker does not start).
* ``LogitsProcessor._get_logits`` computes, for a processor carrying a head, the active rows
  only and returns full-width logits that are ``-inf`` elsewhere; the sampler and rejection
  sampler run unchanged on them. Drafters have their own ``logits_processor`` instances, so
  draft logits are never restricted here (the draft side has its own option).
* ``InputProcessor._validate_params`` (API server / ``LLM`` process, before the request reaches
  the engine) refuses each request the restriction could silently change: sampling
  (temperature > 0), repetition / presence / frequency penalties, logprobs, structured output,
  logit bias, allowed ids, bad words, min_tokens, a thinking budget, engine-level logits
  processors, the V2 model runner. The error is a ``VLLMValidationError`` (HTTP 400) naming the
  option and the condition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi.capabilities import MODEL_RUNNER
from vllm_hust_vspec.host.patching import Patcher, resolve

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

OPTION = "--eagle-target-active-vocab-ids"
LOGITS_PROCESSOR = ("vllm.model_executor.layers.logits_processor", "LogitsProcessor")
INPUT_PROCESSOR = ("vllm.v1.engine.input_processor", "InputProcessor")
VALIDATION_ERROR = ("vllm.exceptions", "VLLMValidationError")
HEAD_ATTR = "_vspec_target_head"  # on the target model's LogitsProcessor instance
CHECKED_ATTR = "_vspec_target_vocab_checked"  # on the runner: attached (or not asked) once
_SAMPLING_EPS = 1e-5  # vLLM's: temperatures below it are greedy


class TargetVocabError(RuntimeError):
    """The target active vocabulary cannot be applied to this engine (worker start)."""


def request_problem(params: Any) -> tuple[str, str] | None:
    """``(parameter, why)`` when a request's sampling parameters break the target active
    vocabulary's exactness conditions, else None (duck-typed ``SamplingParams``)."""

    def val(name: str, default: Any = None) -> Any:
        return getattr(params, name, default)

    checks: tuple[tuple[str, bool, str], ...] = (
        ("temperature", float(val("temperature", 0.0)) >= _SAMPLING_EPS,
         "needs temperature 0 (greedy); sampling needs the full vocabulary"),
        ("repetition_penalty", float(val("repetition_penalty", 1.0)) != 1.0,
         "needs repetition_penalty 1"),
        ("presence_penalty", float(val("presence_penalty", 0.0)) != 0.0,
         "needs presence_penalty 0"),
        ("frequency_penalty", float(val("frequency_penalty", 0.0)) != 0.0,
         "needs frequency_penalty 0"),
        ("logprobs", val("logprobs") is not None, "does not return logprobs"),
        ("prompt_logprobs", val("prompt_logprobs") is not None,
         "does not return prompt logprobs"),
        ("logprob_token_ids", val("logprob_token_ids") is not None,
         "does not return logprobs"),
        ("prompt_logprob_token_ids", val("prompt_logprob_token_ids") is not None,
         "does not return prompt logprobs"),
        ("structured_outputs", val("structured_outputs") is not None,
         "does not support structured output (constrained decoding)"),
        ("logit_bias", bool(val("logit_bias")), "does not support logit_bias"),
        ("allowed_token_ids", bool(val("allowed_token_ids")),
         "does not support allowed_token_ids"),
        ("bad_words", bool(val("bad_words")), "does not support bad_words"),
        ("min_tokens", int(val("min_tokens", 0) or 0) > 0,
         "does not support min_tokens (a logits processor)"),
        ("thinking_token_budget", val("thinking_token_budget") is not None,
         "does not support a thinking budget (a logits processor)"),
    )
    for name, broken, why in checks:
        if broken:
            return name, why
    return None


def engine_problem(vllm_config: Any) -> str | None:
    """Why this engine cannot honour the option for any request, else None."""
    if bool(getattr(vllm_config, "use_v2_model_runner", False)):
        return "is implemented for the V1 model runner only (unset VLLM_USE_V2_MODEL_RUNNER)"
    model_config = getattr(vllm_config, "model_config", None)
    if getattr(model_config, "logits_processors", None):
        return "does not support engine-level logits processors (--logits-processors)"
    return None


def _active_path(get_settings: Callable[[], Settings]) -> str | None:
    settings = get_settings()
    return None if settings is None else settings.eagle_target_active_vocab_ids


def _make_validate_wrapper(
    get_settings: Callable[[], Settings], error_cls: Callable[..., Exception]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def _validate_params(self: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
            result = orig(self, params, *args, **kwargs)
            if _active_path(get_settings) is None or not hasattr(params, "temperature"):
                return result  # off, or pooling params
            engine = engine_problem(getattr(self, "vllm_config", None))
            if engine is not None:
                raise error_cls(f"vSpec {OPTION} {engine}")
            problem = request_problem(params)
            if problem is not None:
                name, why = problem
                raise error_cls(
                    f"vSpec {OPTION} is set on this server: the target's argmax is taken over "
                    f"an active vocabulary, which {why} (got {name}="
                    f"{getattr(params, name)!r}). Send a greedy request without it, or start "
                    f"the server without {OPTION}.",
                    parameter=name,
                )
            return result

        return _validate_params

    return make


def _make_get_logits_wrapper() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def _get_logits(
            self: Any, hidden_states: Any, lm_head: Any, embedding_bias: Any = None,
            skip_gather: bool = False, *args: Any, **kwargs: Any,
        ) -> Any:
            head = self.__dict__.get(HEAD_ATTR)
            if head is None or skip_gather or args or kwargs:
                # skip_gather is the V2 runner's local-shard path, which the option refuses
                return orig(self, hidden_states, lm_head, embedding_bias, skip_gather,
                            *args, **kwargs)
            return head.logits(hidden_states, embedding_bias)

        return _get_logits

    return make


def attach(runner: Any, path: str) -> Any:
    """Build the :class:`TargetHead` for ``runner``'s target model and attach it to its
    ``logits_processor``; probe ``compute_logits`` once. Raises :class:`TargetVocabError`."""
    import torch

    from vllm_hust_vspec.backends.target_head import TargetHead, target_ids

    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    name = type(model).__name__
    lp_cls = resolve(*LOGITS_PROCESSOR)
    lp = getattr(model, "logits_processor", None)
    head = getattr(model, "lm_head", None)
    weight = getattr(head, "weight", None)

    def refuse(why: str) -> TargetVocabError:
        return TargetVocabError(f"vSpec {OPTION}: {why}; unset {OPTION}")

    if not isinstance(lp, lp_cls) or getattr(lp, "logits_as_input", False):
        raise refuse(f"the target {name} has no vLLM LogitsProcessor over an LM head")
    if getattr(runner, "lora_config", None):
        raise refuse("LoRA adapters change the target's LM head (not supported)")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.dtype in (
        torch.int8, torch.uint8,
    ) or weight.is_meta:
        raise refuse(f"the target {name} needs an unquantized 'lm_head.weight'")
    quant = type(getattr(head, "quant_method", None)).__name__
    if quant not in ("UnquantizedEmbeddingMethod", "UnquantizedLinearMethod"):
        raise refuse(f"the target LM head is quantized ({quant})")
    tp = int(getattr(head, "tp_size", 1) or 1)
    if tp > 1:
        raise refuse(
            f"the target LM head is vocab-sharded over {tp} ranks; only tensor_parallel_size "
            "1 is implemented"
        )
    vocab = int(lp.org_vocab_size)
    ids = target_ids(path, vocab)
    dtype = lp.head_dtype if getattr(lp, "head_dtype", None) is not None else weight.dtype
    target_head = TargetHead(weight[:vocab], ids, vocab, dtype=dtype)
    lp.__dict__[HEAD_ATTR] = target_head
    try:
        with torch.inference_mode():
            probe = torch.zeros(1, weight.shape[1], dtype=weight.dtype, device=weight.device)
            model.compute_logits(probe)
    except Exception:
        lp.__dict__.pop(HEAD_ATTR, None)
        raise
    if target_head.calls != 1:
        lp.__dict__.pop(HEAD_ATTR, None)
        raise refuse(f"{name}.compute_logits does not go through LogitsProcessor._get_logits")
    target_head.calls = target_head.tokens = target_head.rows = 0
    logger.info(
        "vSpec: the target's greedy argmax is restricted to %d of %d token ids (%s)",
        target_head.size, vocab, path,
    )
    return target_head


def target_head_of(runner: Any) -> Any:
    """The :class:`TargetHead` attached to ``runner``'s target model, or None."""
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    lp = getattr(model, "logits_processor", None)
    return None if lp is None else lp.__dict__.get(HEAD_ATTR)


def _make_kv_cache_wrapper(
    get_settings: Callable[[], Settings],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def initialize_kv_cache(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = orig(self, *args, **kwargs)
            # The model is loaded and no request has run yet: attach here so a target that
            # cannot take the option stops the worker at start, not at its first request.
            if not self.__dict__.get(CHECKED_ATTR, False):
                path = _active_path(get_settings)
                if path is not None:
                    attach(self, path)
                self.__dict__[CHECKED_ATTR] = True
            return result

        return initialize_kv_cache

    return make


def install_target_vocab(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Patch the request validation, the target runner and the logits processor for
    ``eagle_target_active_vocab_ids``, only when the option is set (nothing is added to the
    per-request and per-step paths otherwise). Fails closed on vLLM-Ascend, whose runner
    computes logits on its own path."""
    from vllm_hust_vspec.host.abi.host_facts import is_ascend_platform

    if _active_path(get_settings) is None:
        return
    if is_ascend_platform():
        raise TargetVocabError(
            f"vSpec {OPTION} is implemented for upstream vLLM's V1 runner only, not for "
            "vLLM-Ascend; unset it"
        )
    error_cls = resolve(*VALIDATION_ERROR)
    patcher.wrap(resolve(*INPUT_PROCESSOR), "_validate_params",
                 _make_validate_wrapper(get_settings, error_cls))
    patcher.wrap(resolve(*MODEL_RUNNER), "initialize_kv_cache",
                 _make_kv_cache_wrapper(get_settings))
    patcher.wrap(resolve(*LOGITS_PROCESSOR), "_get_logits", _make_get_logits_wrapper())


__all__ = [
    "HEAD_ATTR",
    "OPTION",
    "TargetVocabError",
    "attach",
    "engine_problem",
    "install_target_vocab",
    "request_problem",
    "target_head_of",
]
