"""Draft/target vocabulary compatibility (host independent; reads tokenizers with transformers).

A separate draft model is only useful when its token ids mean the same text as the target's.
Checkpoints of one family often share the tokenizer but pad the embedding / LM head to
different sizes (Qwen2.5-0.5B: 151936 rows, Qwen2.5-14B: 152064; both tokenizers hold 151665
tokens). Such a pair is compatible: every real token id exists in both heads, and the rows
beyond the tokenizer are padding. A pair whose tokenizers map tokens to different ids is not,
whatever the head sizes say.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("vllm_hust_vspec.backends.vocab")

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class VocabMismatchError(ValueError):
    """The draft's vocabulary cannot be used with the target's."""


@dataclass(frozen=True)
class VocabCheck:
    """Outcome of comparing a draft's tokenizer and head size with the target's."""

    same_tokenizer: bool | None  # None: the draft ships no tokenizer (nothing to compare)
    tokenizer_size: int | None  # tokens in the (target) tokenizer
    target_vocab: int
    draft_vocab: int
    detail: str = ""

    @property
    def padded_only(self) -> bool:
        """Same token ids, different padded head sizes."""
        return bool(self.same_tokenizer) and self.target_vocab != self.draft_vocab


def has_tokenizer(path: str) -> bool:
    """True when ``path`` is a local directory holding tokenizer files."""
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in TOKENIZER_FILES)


@functools.lru_cache(maxsize=16)
def _vocab(path: str, trust_remote_code: bool) -> tuple[dict[str, int], int]:
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    vocab = dict(tok.get_vocab())
    return vocab, len(tok)


def first_difference(a: dict[str, int], b: dict[str, int]) -> str:
    """A readable description of the first token whose id differs (by the smaller id)."""
    diffs = []
    for token, i in a.items():
        j = b.get(token)
        if j != i:
            diffs.append((i, token, j))
    for token, j in b.items():
        if token not in a:
            diffs.append((j, token, None))
    if not diffs:
        return ""
    i, token, j = min(diffs, key=lambda d: d[0])
    return f"token {token!r} has id {i} in one tokenizer and {j} in the other"


def compare(
    target_tokenizer: str,
    draft_path: str,
    target_vocab: int,
    draft_vocab: int,
    *,
    trust_remote_code: bool = False,
) -> VocabCheck:
    """Compare the target's tokenizer with the one shipped in ``draft_path``."""
    if not has_tokenizer(draft_path):
        return VocabCheck(None, None, target_vocab, draft_vocab, "draft ships no tokenizer")
    t_vocab, t_len = _vocab(str(target_tokenizer), trust_remote_code)
    d_vocab, d_len = _vocab(str(draft_path), trust_remote_code)
    if t_vocab == d_vocab:
        return VocabCheck(True, t_len, target_vocab, draft_vocab)
    return VocabCheck(False, t_len, target_vocab, draft_vocab, first_difference(t_vocab, d_vocab))


def check_draft_vocab(
    target_tokenizer: str,
    draft_path: str,
    target_vocab: int,
    draft_vocab: int,
    *,
    allow_mismatch: bool = False,
    trust_remote_code: bool = False,
) -> VocabCheck:
    """Raise :class:`VocabMismatchError` unless the draft can be used with the target.

    Accepted: same tokenizer with equal or different padded head sizes (as long as both heads
    cover every tokenizer id); a draft without tokenizer files and equal head sizes (vLLM's
    own rule). Refused, unless ``allow_mismatch`` and equal head sizes: different tokenizers.
    """
    check = compare(target_tokenizer, draft_path, target_vocab, draft_vocab,
                    trust_remote_code=trust_remote_code)
    flag = "--draft-allow-tokenizer-mismatch (HUST_VSPEC_DRAFT_ALLOW_TOKENIZER_MISMATCH=1)"
    if check.same_tokenizer is None:
        if target_vocab != draft_vocab:
            raise VocabMismatchError(
                f"vSpec: draft model {draft_path} has vocab size {draft_vocab} but the target "
                f"has {target_vocab}, and the draft directory has no tokenizer files to prove "
                f"the ids agree; add the draft's tokenizer files (tokenizer.json) to {draft_path}"
            )
        return check
    if check.same_tokenizer:
        size = check.tokenizer_size or 0
        if size > min(target_vocab, draft_vocab):
            raise VocabMismatchError(
                f"vSpec: the shared tokenizer has {size} tokens but the "
                f"{'draft' if draft_vocab < target_vocab else 'target'} head has only "
                f"{min(target_vocab, draft_vocab)} rows ({draft_path} vs {target_tokenizer})"
            )
        return check
    message = (
        f"vSpec: the draft model's tokenizer ({draft_path}) differs from the target's "
        f"({target_tokenizer}): {check.detail}. Draft token ids would mean different text and "
        f"nearly every draft would be rejected."
    )
    if not allow_mismatch:
        raise VocabMismatchError(
            f"{message} Use a draft trained with the target's tokenizer, vLLM's "
            f"speculative_config use_heterogeneous_vocab (token-id mapping), or force it with "
            f"{flag}."
        )
    if target_vocab != draft_vocab:
        raise VocabMismatchError(
            f"{message} Forcing ({flag}) needs equal vocab sizes, but they are {target_vocab} "
            f"(target) and {draft_vocab} (draft); use vLLM's use_heterogeneous_vocab instead."
        )
    logger.warning("%s Continuing because the mismatch is forced (%s).", message, flag)
    return check


__all__ = [
    "TOKENIZER_FILES",
    "VocabCheck",
    "VocabMismatchError",
    "check_draft_vocab",
    "compare",
    "first_difference",
    "has_tokenizer",
]
