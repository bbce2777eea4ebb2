"""The target's LM head over an active vocabulary, for greedy decoding (pure torch).

A greedy target only needs the argmax of its logits. :class:`TargetHead` keeps a copy of the
LM-head rows of the active ids and computes logits for those rows only (``A / V`` of the
head's multiply-adds), then scatters them into a full-width row filled with ``-inf``. The
sampler and the rejection sampler therefore keep consuming full-width logits indexed by real
token ids: their argmax is the best *active* id, ties go to the lowest id as with the full
head, and no id mapping is needed anywhere downstream.

Exact (token-identical to the full head) whenever the full head's argmax is an active id;
otherwise the best active id wins instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from vllm_hust_vspec.backends.draft_head import ActiveVocabError, ids_in_range


def target_ids(path: str | Path, vocab_size: int) -> list[int]:
    """The active target ids of ``path`` (draft active-vocab file format), deduplicated in
    file order. Ids outside ``[0, vocab_size)`` and an empty file are errors naming it."""
    ids = ids_in_range(path, vocab_size, "target")
    if not ids:
        raise ActiveVocabError(f"{path}: the target active vocabulary file has no ids")
    return ids


class TargetHead:
    """LM-head rows of the active ids; :meth:`logits` returns full-width logits that are
    ``-inf`` outside the active set.

    ``calls``, ``tokens`` and ``rows`` count what was computed (tests and logs: the rows per
    call are ``len(ids)``, not the vocabulary size).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        ids: Sequence[int],
        vocab_size: int,
        dtype: torch.dtype | None = None,
    ) -> None:
        if weight.dim() != 2:
            raise ActiveVocabError(f"LM-head weight must be 2-D, got {tuple(weight.shape)}")
        if not ids:
            raise ActiveVocabError("the target active vocabulary is empty")
        if max(ids) >= min(vocab_size, weight.shape[0]) or min(ids) < 0:
            raise ActiveVocabError(
                f"active ids must lie in [0, {min(vocab_size, weight.shape[0])})"
            )
        dtype = dtype or weight.dtype
        index = torch.tensor(list(ids), dtype=torch.long, device=weight.device)
        # A contiguous copy of the rows: gathering them every step would read as much memory
        # as the restricted multiply itself.
        self.weight = weight.detach().index_select(0, index).to(dtype).contiguous()
        self.index = index
        self.vocab_size = int(vocab_size)
        self.dtype = dtype
        self.calls = 0
        self.tokens = 0
        self.rows = 0

    @property
    def size(self) -> int:
        """Number of active ids."""
        return int(self.index.numel())

    def logits(self, hidden: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``[..., vocab_size]`` logits: the active rows' values, ``-inf`` elsewhere.
        ``bias`` is the full-width embedding bias, if the model has one."""
        if bias is not None:
            bias = bias.index_select(0, self.index).to(self.dtype)
        sub = F.linear(hidden.to(self.dtype), self.weight, bias)
        out = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))
        out.index_copy_(-1, self.index, sub)
        n = int(sub.numel() // max(self.size, 1))
        self.calls += 1
        self.tokens += n
        self.rows += self.size
        return out

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        """The best active token id per position (full ids)."""
        return self.logits(hidden).argmax(dim=-1)


__all__ = ["TargetHead", "target_ids"]
