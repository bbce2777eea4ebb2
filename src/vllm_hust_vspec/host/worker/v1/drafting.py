"""Draft-side patches on upstream vLLM (worker process): confidence stop, cheaper draft LM head,
padded-vocabulary guards.

Where the draft's distribution is visible in vLLM 0.32: ``SpecDecodeBaseProposer.propose``
(EAGLE, EAGLE-3, MTP and the separate draft model all inherit it) runs the drafter K times and
each greedy draft token comes from ``_greedy_sample(hidden_states)`` =
``self.model.compute_logits(hidden_states).argmax(-1)`` with one row per request. So:

* ``_greedy_sample`` is replaced, for proposers with a feature on, by the same computation plus
  (a) the top-k probabilities of each position recorded for the confidence stop, (b) draft ids
  the target does not have masked out (a draft head padded beyond the target's), or (c) the
  :class:`~vllm_hust_vspec.backends.draft_head.DraftHead` (active vocabulary / int8).
  Proposers using local-argmax reduction or vLLM's heterogeneous-vocabulary mapping keep the
  original (the confidence stop is then off for them; logged once).
* ``propose`` resets the recording and, when the target's vocabulary is larger than the
  draft's, clamps the target ids fed to the draft into its range (those ids are padding that a
  shared tokenizer never produces; the guard only keeps the draft's embedding in bounds).
* ``GPUModelRunner.take_draft_token_ids`` (sync scheduling: the drafts the scheduler will
  verify) truncates each request's list at its first uncertain position. The scheduler then
  schedules ragged drafts; its hook counts drafted tokens from ``scheduled_spec_decode_tokens``,
  so the controller keeps getting exact per-request feedback. Under async scheduling the
  drafts are consumed on the device and the stop is skipped (logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi.capabilities import BASE_PROPOSER, MODEL_RUNNER
from vllm_hust_vspec.host.patching import Patcher, resolve, resolve_any

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

STATE_ATTR = "_vspec_draft_state"


class DraftSideError(RuntimeError):
    """A draft-side feature cannot run with this drafter."""


@dataclass(frozen=True)
class DraftSideConfig:
    """The draft-side features the settings ask for."""

    entropy_stop: bool = False
    entropy_rule: str = "topk-entropy"
    entropy_threshold: float = 0.6  # 0.3 ** 2 / 0.15: 0.14.3's default
    entropy_topk: int = 2
    active_vocab_size: int | None = None
    active_vocab_file: str | None = None
    lm_head_quant: str = "none"

    @property
    def head_changed(self) -> bool:
        """True when the draft LM head is replaced by a :class:`DraftHead`."""
        return (
            self.active_vocab_size is not None
            or self.active_vocab_file is not None
            or self.lm_head_quant != "none"
        )


def draft_config(settings: Settings) -> DraftSideConfig:
    """Read the draft-side options from vSpec settings (defaults without settings)."""
    if settings is None:
        return DraftSideConfig()
    from vllm_hust_vspec.adaptive.confidence import scaled_threshold
    from vllm_hust_vspec.backends.confidence_adapter import (
        DEFAULT_SCALE,
        DEFAULT_THRESHOLD,
        DEFAULT_TOPK_BY_RULE,
    )

    rule = str(settings.confidence_stop_rule or "topk-entropy")
    threshold = settings.confidence_stop_threshold
    topk = settings.confidence_stop_topk
    scale = settings.confidence_stop_scale
    return DraftSideConfig(
        entropy_stop=bool(settings.confidence_stop),
        entropy_rule=rule,
        entropy_threshold=scaled_threshold(
            float(DEFAULT_THRESHOLD[rule] if threshold is None else threshold),
            DEFAULT_SCALE.get(rule) if scale is None else scale,
        ),
        entropy_topk=int(DEFAULT_TOPK_BY_RULE[rule] if topk is None else topk),
        active_vocab_size=settings.eagle_draft_active_vocab_size,
        active_vocab_file=settings.eagle_draft_active_vocab_file,
        lm_head_quant=str(settings.eagle_draft_lm_head_quant or "none"),
    )


def draft_config_reader(get_settings: Callable[[], Settings]) -> Callable[[], DraftSideConfig]:
    """``draft_config`` of the current settings, rebuilt only when the settings object changes
    (the drafting hot path asks on every draft position)."""
    last: list[Any] = [None, None]

    def get_config() -> DraftSideConfig:
        settings = get_settings()
        if last[0] is not settings:
            last[0], last[1] = settings, draft_config(settings)
        config: DraftSideConfig = last[1]
        return config

    return get_config


@dataclass
class ProposerState:
    """Per-proposer decisions, made at its first draft (after the models are loaded)."""

    config: DraftSideConfig
    target_vocab: int | None
    head: Any = None  # DraftHead when the LM head is replaced
    mask_from: int | None = None  # draft logits at ids >= this are impossible for the target
    clamp_inputs: int | None = None  # target ids >= this do not exist in the draft's head
    record: bool = False  # record top-k probabilities for the confidence stop
    steps: list[Any] | None = None  # recorded [B, k] per draft position (current propose)
    pending: list[Any] | None = None  # the last propose's recording, for the runner
    batch: int = 0
    checked: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return (
            self.head is None and self.mask_from is None and self.clamp_inputs is None
            and not self.record
        )


def _draft_vocab(proposer: Any) -> int | None:
    try:
        return int(proposer.speculative_config.draft_model_config.get_vocab_size())
    except Exception:  # noqa: BLE001 - mtp/eagle configs without a separate vocab size
        return None


def _target_vocab(proposer: Any) -> int | None:
    try:
        return int(proposer.vllm_config.model_config.get_vocab_size())
    except Exception:  # noqa: BLE001
        return None


def lm_head_weight(proposer: Any) -> Any:
    """The draft's unquantized LM-head rows on one rank (a V1 proposer or a V2 speculator);
    raises :class:`DraftSideError` naming what the options need."""
    model = proposer.model
    head = getattr(model, "lm_head", None)
    weight = getattr(head, "weight", None)
    import torch

    if not isinstance(weight, torch.Tensor) or weight.dtype == torch.int8:
        raise DraftSideError(
            f"vSpec: the draft LM head options (eagle_draft_active_vocab_* / "
            f"eagle_draft_lm_head_quant) need an unquantized 'lm_head.weight' on the draft "
            f"model, but {type(model).__name__} has none; unset those options"
        )
    tp_size = int(getattr(head, "tp_size", 1) or 1)
    if tp_size > 1:
        raise DraftSideError(
            "vSpec: the draft LM head options need the draft head on one rank "
            f"(it is vocab-sharded over {tp_size} ranks); set draft_tensor_parallel_size 1"
            " or unset the options"
        )
    org = getattr(getattr(model, "logits_processor", None), "org_vocab_size", None)
    return weight[: int(org)] if org else weight


def _build_state(proposer: Any, config: DraftSideConfig) -> ProposerState:
    state = ProposerState(config=config, target_vocab=_target_vocab(proposer))
    special = bool(getattr(proposer, "use_local_argmax_reduction", False)) or bool(
        getattr(proposer, "use_heterogeneous_vocab", False)
    )
    if special:
        if config.entropy_stop or config.head_changed:
            logger.warning(
                "vSpec: the drafter uses %s; the confidence stop and draft LM-head options are "
                "off for it", "local argmax reduction"
                if getattr(proposer, "use_local_argmax_reduction", False)
                else "vLLM's heterogeneous-vocabulary mapping",
            )
        return state
    draft_vocab = _draft_vocab(proposer)
    tv = state.target_vocab
    if draft_vocab is not None and tv is not None and draft_vocab != tv:
        if draft_vocab > tv:
            state.mask_from = tv
        else:
            state.clamp_inputs = draft_vocab
        logger.info(
            "vSpec: draft head has %d rows, target %d: sharing token ids without copying the "
            "LM head (%s)", draft_vocab, tv,
            "draft ids beyond the target's are masked" if draft_vocab > tv
            else "target padding ids are clamped for the draft's input",
        )
    if config.head_changed:
        from vllm_hust_vspec.backends.draft_head import DraftHead, active_ids

        weight = lm_head_weight(proposer)
        vocab = int(weight.shape[0])
        if tv is not None:
            vocab = min(vocab, tv)  # never propose an id the target does not have
        ids = active_ids(vocab, config.active_vocab_size, config.active_vocab_file)
        state.head = DraftHead.build(weight, ids, config.lm_head_quant)
        logger.info(
            "vSpec: draft LM head over %d of %d token ids (quant %s)", state.head.size,
            int(weight.shape[0]), config.lm_head_quant,
        )
    state.record = config.entropy_stop and state.head is None
    return state


def state_of(proposer: Any, get_config: Callable[[], DraftSideConfig]) -> ProposerState:
    """The proposer's state, built on first use."""
    state = getattr(proposer, STATE_ATTR, None)
    if state is None:
        state = _build_state(proposer, get_config())
        setattr(proposer, STATE_ATTR, state)
    return state


def _make_greedy_wrapper(
    get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def _greedy_sample(self: Any, hidden_states: Any) -> Any:
            state = state_of(self, get_config)
            if state.idle or getattr(self, "use_local_argmax_reduction", False) or getattr(
                self, "use_heterogeneous_vocab", False
            ):
                return orig(self, hidden_states)
            if state.head is not None:
                return state.head.argmax(hidden_states)
            logits = self.model.compute_logits(hidden_states)
            if state.mask_from is not None and logits.shape[-1] > state.mask_from:
                logits[..., state.mask_from:] = float("-inf")
            if state.record and state.steps is not None:
                from vllm_hust_vspec.backends.confidence_adapter import topk_probs

                state.steps.append(topk_probs(logits, state.config.entropy_topk))
            return logits.argmax(dim=-1)

        return _greedy_sample

    return make


def _clamp(value: Any, limit: int) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.numel():
        return value.clamp(max=limit - 1)
    return value


def _make_propose_wrapper(
    get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
            # K is the first argument upstream and absent on the vLLM-HUST core: pass through
            state = state_of(self, get_config)
            if state.idle:
                return orig(self, *args, **kwargs)
            if state.clamp_inputs is not None:
                for name in ("target_token_ids", "next_token_ids"):
                    if name in kwargs:
                        kwargs[name] = _clamp(kwargs[name], state.clamp_inputs)
            state.steps = [] if state.record else None
            state.pending = None
            try:
                out = orig(self, *args, **kwargs)
            finally:
                steps, state.steps = state.steps, None
            if steps and getattr(out, "ndim", 0) == 2 and out.shape[1] == len(steps) and all(
                s.shape[0] == out.shape[0] for s in steps
            ):
                state.pending = steps
                state.batch = int(out.shape[0])
            return out

        return propose

    return make


def _make_take_wrapper(
    get_config: Callable[[], DraftSideConfig],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    warned: list[bool] = []

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def take_draft_token_ids(self: Any) -> Any:
            out = orig(self)
            state = getattr(getattr(self, "drafter", None), STATE_ATTR, None)
            if state is None or state.pending is None:
                return out
            steps, state.pending = state.pending, None
            if out is None:
                return out
            if getattr(self, "use_async_scheduling", False):
                if not warned:
                    warned.append(True)
                    logger.warning("vSpec: the confidence stop needs synchronous scheduling; "
                                   "it is skipped under async scheduling")
                return out
            from vllm_hust_vspec.backends.confidence_adapter import keep_counts, truncate

            cfg = state.config
            keep = keep_counts(steps, rule=cfg.entropy_rule, threshold=cfg.entropy_threshold)
            out.draft_token_ids = truncate(out.draft_token_ids, keep)
            return out

        return take_draft_token_ids

    return make


def install_drafting(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Patch the proposer and runner for the draft-side features (always installed when vSpec
    is enabled: the padded-vocabulary guards need no option; proposers with nothing to do run
    vLLM's code unchanged)."""

    def get_config() -> DraftSideConfig:
        return draft_config(get_settings())

    base = resolve_any(*BASE_PROPOSER)
    runner = resolve(*MODEL_RUNNER)
    patcher.wrap(base, "_greedy_sample", _make_greedy_wrapper(get_config))
    patcher.wrap(base, "propose", _make_propose_wrapper(get_config))
    patcher.wrap(runner, "take_draft_token_ids", _make_take_wrapper(get_config))
    cfg = get_config()
    if cfg.entropy_stop:
        logger.info(
            "vSpec: confidence stop on (rule %s, threshold %.3g, top-%d): drafts are cut at "
            "their first uncertain position", cfg.entropy_rule, cfg.entropy_threshold,
            cfg.entropy_topk,
        )


__all__ = [
    "STATE_ATTR",
    "DraftSideConfig",
    "DraftSideError",
    "ProposerState",
    "draft_config",
    "draft_config_reader",
    "install_drafting",
    "lm_head_weight",
    "state_of",
]
