"""Model Runner V2 patches (``vllm/v1/worker/gpu/``): the sticky drafter skip, gamma honoured
by the separate draft model, the padded-vocabulary draft guard and the draft LM-head options.

How a step's drafts are made on V2 (vLLM 0.32 / 0.33 ``gpu/model_runner.py``):
``execute_model(scheduler_output)`` keeps ``num_spec_tokens_to_schedule`` in its
``execute_model_state``; ``sample_tokens`` verifies, then calls
``self.speculator.propose(..., num_speculative_tokens=K)``, masks the columns past K with -1,
stores the drafts per request in ``req_states.draft_tokens`` and hands the first K columns to
the scheduler. So:

* **Sticky gamma 0.** The scheduler hook marks a pinned step on its output
  (:data:`~vllm_hust_vspec.host.wire.SKIP_ATTR`); the wrapped ``execute_model`` remembers the
  mark, the wrapped ``sample_tokens`` arms the speculator for that one call, and the wrapped
  ``propose`` returns all -1 drafts without running the drafter (the same value the
  speculators return for K = 0). Dummy runs (profiling, graph capture, DP padding) always run.
  The requests of such a step have holes in their draft KV; the scheduler hook's sticky
  cohort voids their drafts for the rest of their lives, as on the V1 runner.
* **Gamma on the draft model.** ``StandaloneARSpeculator.propose`` accepts K but its decode
  loop runs ``range(1, self.num_speculative_steps)`` whatever K says (the runner masks the
  extra drafts). The wrapper runs that loop only to K: the speculator's step count is lowered
  for the one call (its only reader inside ``propose`` is the loop and the ``== 1`` early
  return), and the full-width draft buffer is returned as the runner expects. K = 0 keeps the
  first (prefill) pass, so the draft KV stays in step ("sync" gamma 0).

* **A draft vocabulary padded beyond the target's.** Every draft token of the speculators
  above comes from ``DraftModelSpeculator.compute_draft_logits`` (greedy argmax or the
  Gumbel sample of the same logits); the wrapper sets the logits of ids the target does not
  have to -inf, so no such id is ever proposed. It is plain tensor code, so a captured draft
  graph contains it. ``use_local_argmax_reduction`` bypasses those logits (the runner table
  refuses it with a padded draft).
* **The draft LM-head options** (active vocabulary, int8): the same wrapper computes the
  logits with vSpec's :class:`~vllm_hust_vspec.backends.draft_head.DraftHead` over the
  active rows and scatters them into a full-vocabulary row of -inf, so greedy argmax and
  Gumbel sampling (whose cached draft logits the rejection sampler reads) both see the
  restricted distribution. The head is built at the first draft, from the draft's
  ``lm_head.weight`` (one rank, unquantized, as on the V1 runner).
* **The confidence stop** (synchronous scheduling, eager drafting): the wrapped ``propose``
  opens a recording, the ``compute_draft_logits`` wrapper appends each draft position's top-k
  probabilities (rows = the batch's requests, in ``input_batch.req_ids`` order), and the
  wrapped ``GPUModelRunner.take_draft_token_ids`` cuts each request's list (placeholders in
  sync mode, the draft ids with structured outputs) at its first uncertain position. The
  scheduler then schedules ragged drafts and V2 reads that many of the device drafts. A
  captured draft graph replays without Python, so the runner table refuses the stop where
  EAGLE/MTP draft graphs are captured; the standalone draft model never captures any.

EAGLE / EAGLE-3 / MTP (``TargetDependentARSpeculator``) already draft exactly K; multi-module
MTP drafts its fixed width in one pass (the runner table says so). Nothing here runs on the
V1 runner or on vLLM-Ascend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi.host_facts import (
    V2_BASE_SPECULATOR,
    V2_RUNNER,
    V2_SPECULATORS,
    V2_STANDALONE,
    v2_runner_available,
)
from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.wire import SKIP_ATTR

if TYPE_CHECKING:
    from vllm_hust_vspec.host.worker.v1.drafting import DraftSideConfig
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

# On the runner: the skip mark of the step whose execute_model ran last.
PENDING_ATTR = "_vspec_skip_pending"
# On the speculator: set only for the duration of one sample_tokens call.
ARMED_ATTR = "_vspec_skip_armed"
# On the speculator: the first draft id the target lacks (None: nothing to mask), decided once.
MASK_ATTR = "_vspec_mask_from"
# On the speculator: its DraftHead (None: vLLM's own LM head), built once.
HEAD_ATTR = "_vspec_draft_head"
# On the speculator: top-k probabilities per draft position of the propose in progress, and
# those of the last propose (with its K), waiting for take_draft_token_ids.
STEPS_ATTR = "_vspec_conf_steps"
PENDING_STEPS_ATTR = "_vspec_conf_pending"


def _make_execute_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        setattr(self, PENDING_ATTR, bool(getattr(scheduler_output, SKIP_ATTR, False)))
        return orig(self, scheduler_output, *args, **kwargs)

    return execute_model


def _make_sample_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        skip = getattr(self, PENDING_ATTR, False)
        speculator = getattr(self, "speculator", None)
        if not skip or speculator is None:
            return orig(self, *args, **kwargs)
        setattr(self, PENDING_ATTR, False)
        setattr(speculator, ARMED_ATTR, True)
        try:
            return orig(self, *args, **kwargs)
        finally:
            setattr(speculator, ARMED_ATTR, False)

    return sample_tokens


def skipped_drafts(speculator: Any, num_reqs: int) -> Any:
    """What a skipped ``propose`` returns: the speculator's draft buffer, all -1 (no draft)."""
    drafts = speculator.draft_tokens[:num_reqs]
    drafts.fill_(-1)
    return drafts


def _make_propose_wrapper(
    cap_steps: bool, get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def propose(self: Any, input_batch: Any, *args: Any, **kwargs: Any) -> Any:
            dummy = bool(kwargs.get("dummy_run", False))
            setattr(self, PENDING_STEPS_ATTR, None)
            if getattr(self, ARMED_ATTR, False) and not dummy:
                return skipped_drafts(self, int(input_batch.num_reqs))
            k = kwargs.get("num_speculative_tokens")
            record = not dummy and get_config().entropy_stop
            setattr(self, STEPS_ATTR, [] if record else None)
            try:
                drafts = _propose_to_k(orig, self, input_batch, cap_steps, k, args, kwargs)
            finally:
                recorded = getattr(self, STEPS_ATTR, None)
                setattr(self, STEPS_ATTR, None)
            if recorded:
                width = int(self.num_speculative_steps) if k is None else int(k)
                setattr(self, PENDING_STEPS_ATTR, (recorded, width))
            return drafts

        return propose

    return make


def _propose_to_k(orig: Callable[..., Any], spec: Any, input_batch: Any, cap_steps: bool,
                  k: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    steps = int(spec.num_speculative_steps)
    if not cap_steps or k is None or int(k) >= steps:
        return orig(spec, input_batch, *args, **kwargs)
    # The decode loop reads the step count; K = 0 keeps the prefill pass (sync zero).
    spec.num_speculative_steps = max(int(k), 1)
    try:
        orig(spec, input_batch, *args, **kwargs)
    finally:
        spec.num_speculative_steps = steps
    return spec.draft_tokens[: int(input_batch.num_reqs)]


def mask_from(speculator: Any) -> int | None:
    """The first draft id past the target's vocabulary, or None when the draft has none."""
    if hasattr(speculator, MASK_ATTR):
        return getattr(speculator, MASK_ATTR)  # type: ignore[no-any-return]
    value: int | None = None
    try:
        target = int(speculator.vllm_config.model_config.get_vocab_size())
        if int(speculator.vocab_size) > target:
            value = target
    except (AttributeError, TypeError, ValueError):
        value = None
    setattr(speculator, MASK_ATTR, value)
    if value is not None:
        logger.info("vSpec: draft ids >= %d (absent from the target) are never proposed "
                    "(Model Runner V2 draft guard)", value)
    return value


def draft_head(speculator: Any, config: DraftSideConfig) -> Any:
    """The speculator's :class:`DraftHead` when the options ask for one (else None)."""
    if hasattr(speculator, HEAD_ATTR):
        return getattr(speculator, HEAD_ATTR)
    head = None
    if config.head_changed:
        from vllm_hust_vspec.backends.draft_head import DraftHead, active_ids
        from vllm_hust_vspec.host.worker.v1.drafting import lm_head_weight

        weight = lm_head_weight(speculator)
        vocab = int(weight.shape[0])
        target = mask_from(speculator)
        if target is not None:
            vocab = min(vocab, target)  # never propose an id the target does not have
        ids = active_ids(vocab, config.active_vocab_size, config.active_vocab_file)
        head = DraftHead.build(weight, ids, config.lm_head_quant)
        logger.info("vSpec: draft LM head over %d of %d token ids (quant %s; Model Runner V2)",
                    head.size, int(weight.shape[0]), config.lm_head_quant)
    setattr(speculator, HEAD_ATTR, head)
    return head


def _head_logits(head: Any, hidden: Any, vocab: int) -> Any:
    import torch

    part = head.logits(hidden)
    full = torch.full((hidden.shape[0], vocab), float("-inf"), dtype=part.dtype,
                      device=part.device)
    full[:, head.ids] = part
    return full


def _make_draft_logits_wrapper(
    get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Any]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def compute_draft_logits(self: Any, hidden_states: Any, *args: Any,
                                 **kwargs: Any) -> Any:
            head = draft_head(self, get_config())
            if head is not None:
                return _head_logits(head, hidden_states, int(self.vocab_size))
            logits = orig(self, hidden_states, *args, **kwargs)
            start = mask_from(self)
            if start is not None:
                logits[..., start:] = float("-inf")
            steps = getattr(self, STEPS_ATTR, None)
            if steps is not None:
                from vllm_hust_vspec.backends.confidence_adapter import topk_probs

                steps.append(topk_probs(logits, get_config().entropy_topk))
            return logits

        return compute_draft_logits

    return make


def _make_take_wrapper(
    get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Any]:
    warned: list[bool] = []

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def take_draft_token_ids(self: Any) -> Any:
            out = orig(self)
            speculator = getattr(self, "speculator", None)
            pending = getattr(speculator, PENDING_STEPS_ATTR, None)
            if pending is None:
                return out
            setattr(speculator, PENDING_STEPS_ATTR, None)
            steps, width = pending
            if out is None or width <= 0:
                return out
            rows = len(out.req_ids)
            if len(steps) < width or any(int(s.shape[0]) < rows for s in steps[:width]):
                if not warned:  # a replayed draft graph recorded nothing (table refuses it)
                    warned.append(True)
                    logger.warning("vSpec: the confidence stop saw %d of %d draft positions; "
                                   "drafts are left uncut", len(steps), width)
                return out
            from vllm_hust_vspec.backends.confidence_adapter import keep_counts, truncate

            cfg = get_config()
            keep = keep_counts([s[:rows] for s in steps[:width]], rule=cfg.entropy_rule,
                               threshold=cfg.entropy_threshold)
            out.draft_token_ids = truncate(out.draft_token_ids, keep)
            return out

        return take_draft_token_ids

    return make


def install(patcher: Patcher, get_settings: Callable[[], Settings]) -> bool:
    """Patch Model Runner V2 when this vLLM has it; returns whether it did."""
    if not v2_runner_available():
        return False
    from vllm_hust_vspec.host.worker.v1.drafting import draft_config_reader

    get_config = draft_config_reader(get_settings)

    runner_cls = resolve(*V2_RUNNER)
    patcher.wrap(runner_cls, "execute_model", _make_execute_wrapper)
    patcher.wrap(runner_cls, "sample_tokens", _make_sample_wrapper)
    patcher.wrap(runner_cls, "take_draft_token_ids", _make_take_wrapper(get_config))
    for target in V2_SPECULATORS:
        patcher.wrap(resolve(*target), "propose",
                     _make_propose_wrapper(target == V2_STANDALONE, get_config))
    patcher.wrap(resolve(*V2_BASE_SPECULATOR), "compute_draft_logits",
                 _make_draft_logits_wrapper(get_config))
    return True


__all__ = [
    "ARMED_ATTR",
    "HEAD_ATTR",
    "PENDING_STEPS_ATTR",
    "STEPS_ATTR",
    "MASK_ATTR",
    "PENDING_ATTR",
    "V2_RUNNER",
    "V2_SPECULATORS",
    "draft_head",
    "install",
    "mask_from",
    "skipped_drafts",
]
