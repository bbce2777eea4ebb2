"""Draft/target vocabulary check on upstream vLLM (front-end and worker processes).

vLLM 0.32 refuses a separate draft model whose head size differs from the target's
(``SpeculativeConfig.verify_equal_vocab_size_if_draft_model``, run while the engine config is
built and again by ``DraftModelProposer``) and silently accepts one with the same size but a
different tokenizer. With vSpec enabled the rule becomes the tokenizer's
(:func:`vllm_hust_vspec.backends.vocab.check_draft_vocab`): same tokenizer with different
padded sizes is accepted (the draft-side guards in ``host.drafting`` keep ids in range, no LM
head is copied), different tokenizers are refused unless forced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.abi.capabilities import SPEC_CONFIG
from vllm_hust_vspec.host.patching import Patcher, resolve

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

VERIFY = "verify_equal_vocab_size_if_draft_model"


def _make_verify_wrapper(
    allow: Callable[[], bool], allow_padding: Callable[[], bool] = lambda: True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def verify(self: Any) -> Any:
            target = getattr(self, "target_model_config", None)
            draft = getattr(self, "draft_model_config", None)
            if self.method != "draft_model" or target is None or draft is None:
                return orig(self)
            from vllm_hust_vspec.backends.vocab import VocabMismatchError, check_draft_vocab

            target_vocab = int(target.get_vocab_size())
            draft_vocab = int(draft.get_vocab_size())
            try:
                check = check_draft_vocab(
                    str(target.tokenizer), str(draft.model), target_vocab, draft_vocab,
                    allow_mismatch=allow(),
                    trust_remote_code=bool(getattr(target, "trust_remote_code", False)),
                )
            except VocabMismatchError as exc:
                raise ValueError(str(exc)) from exc
            if target_vocab != draft_vocab and getattr(
                self, "draft_sample_method", "greedy"
            ) != "greedy":
                raise ValueError(
                    "vSpec: draft and target heads differ in size "
                    f"({draft_vocab} vs {target_vocab}); probabilistic draft sampling would "
                    "compare distributions of different widths. Use draft_sample_method "
                    "'greedy' (the default)."
                )
            if check.padded_only and not allow_padding():
                raise ValueError(
                    f"vSpec: draft {draft.model} shares the target's tokenizer but its head is "
                    f"padded ({draft_vocab} vs {target_vocab} ids) and shared_tokenizer_padding "
                    "is off (--no-shared-tokenizer-padding); enable it or use a draft with the "
                    "target's vocabulary size"
                )
            if check.padded_only:
                logger.info(
                    "vSpec: draft %s and target share the tokenizer; head sizes %d vs %d "
                    "differ only by padding (accepted)", draft.model, draft_vocab, target_vocab,
                )
            return None

        return verify

    return make


def install_vocab_check(patcher: Patcher, get_settings: Callable[[], Settings]) -> None:
    """Replace vLLM's equal-size rule with the tokenizer rule (see the module docstring)."""

    def allow() -> bool:
        return bool(get_settings().draft_allow_tokenizer_mismatch)

    def allow_padding() -> bool:
        return bool(get_settings().shared_tokenizer_padding)

    spec_cls = resolve(*SPEC_CONFIG)
    patcher.wrap(spec_cls, VERIFY, _make_verify_wrapper(allow, allow_padding))


__all__ = ["VERIFY", "install_vocab_check"]
