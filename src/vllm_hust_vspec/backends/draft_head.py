"""A cheaper draft LM head: an active vocabulary and/or int8 weights, greedy only (pure torch).

A drafter only needs the argmax of its logits. With a large vocabulary the LM head is a big
part of a small drafter's step, so :class:`DraftHead` can

* compute logits over a subset of token ids (the *active vocabulary*, most frequent first) and
  map the winning index back to the full id, and/or
* use per-output-channel int8 weights (``w8a16``: hidden state kept in float; ``w8a8``: hidden
  state also quantized per token), processed in row chunks so no dequantized copy of the
  whole head is ever materialised.

Only the *drafts* can change; the target verifies them, so strict acceptance stays exact and
only the acceptance rate may move. Monotone logit transforms (scale > 0, soft cap) do not
change an argmax and are therefore not applied.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

QUANT_MODES = ("none", "w8a16", "w8a8")
CHUNK_ROWS = 8192


class ActiveVocabError(ValueError):
    """A bad active-vocabulary file or size."""


def read_ids_file(path: str | Path) -> list[int]:
    """Token ids from a JSON list (or ``{"ids": [...]}``) or a text file with one id per line
    (``#`` comments allowed), in file order (most frequent first by convention)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ActiveVocabError(f"cannot read active vocabulary file {p}: {exc}") from exc
    stripped = text.lstrip()
    try:
        if stripped.startswith(("[", "{")):
            data = json.loads(text)
            raw = data["ids"] if isinstance(data, dict) else data
            ids = [int(x) for x in raw]
        else:
            ids = [int(line.split("#", 1)[0]) for line in text.splitlines()
                   if line.split("#", 1)[0].strip()]
    except (ValueError, KeyError, TypeError) as exc:
        raise ActiveVocabError(
            f"{p}: expected a JSON list of token ids, {{\"ids\": [...]}}, or one integer id per "
            f"line ({exc})"
        ) from exc
    return ids


def ids_in_range(path: str | Path, vocab_size: int, role: str) -> list[int]:
    """The ids of ``path`` deduplicated in file order; an id outside ``[0, vocab_size)`` is
    an error naming the file and the ``role``'s vocabulary ("draft", "target")."""
    seen: dict[int, None] = {}
    for t in read_ids_file(path):
        if not 0 <= t < vocab_size:
            raise ActiveVocabError(
                f"{path}: token id {t} is outside the {role} vocabulary [0, {vocab_size})"
            )
        seen.setdefault(t, None)
    return list(seen)


def active_ids(
    vocab_size: int, size: int | None = None, path: str | Path | None = None
) -> list[int]:
    """The active token ids: the first ``size`` ids of ``path`` (deduplicated, in order), or
    ids ``0..size-1`` without a file (byte-level BPE vocabularies put frequent merges first).

    Ids outside ``[0, vocab_size)`` are errors naming the file.
    """
    if path is not None:
        ids = ids_in_range(path, vocab_size, "draft")
        if size is not None:
            ids = ids[:size]
    elif size is not None:
        ids = list(range(min(size, vocab_size)))
    else:
        ids = list(range(vocab_size))
    if not ids:
        raise ActiveVocabError(f"active vocabulary is empty (file {path}, size {size})")
    return ids


def quantize_rows_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``weight ~= q * scale[:, None]``; returns ``(q, scale)``."""
    w = weight.float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def _quantize_act(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = hidden.float()
    scale = h.abs().amax(dim=-1).clamp(min=1e-12) / 127.0
    return torch.round(h / scale[:, None]).clamp(-127, 127), scale


@dataclass
class DraftHead:
    """Greedy LM head over an active vocabulary, optionally int8 (see the module docstring)."""

    ids: torch.Tensor  # [N] full-vocabulary ids of the rows below (long)
    weight: torch.Tensor  # [N, H] float rows, or int8 when quantized
    scale: torch.Tensor | None  # [N] per-row scales when quantized
    quant: str = "none"
    chunk_rows: int = CHUNK_ROWS

    @classmethod
    def build(
        cls,
        full_weight: torch.Tensor,
        ids: Sequence[int] | None = None,
        quant: str = "none",
        chunk_rows: int = CHUNK_ROWS,
    ) -> DraftHead:
        """Copy the active rows of ``full_weight`` ([V, H]) and quantize them if asked."""
        if quant not in QUANT_MODES:
            raise ValueError(f"draft LM-head quant {quant!r}: use one of {', '.join(QUANT_MODES)}")
        device = full_weight.device
        index = torch.as_tensor(
            list(ids) if ids is not None else range(full_weight.shape[0]),
            dtype=torch.long, device=device,
        )
        rows = full_weight.detach().index_select(0, index)
        if quant == "none":
            return cls(index, rows.contiguous(), None, quant, chunk_rows)
        q, scale = quantize_rows_int8(rows)
        return cls(index, q.contiguous(), scale, quant, chunk_rows)

    @property
    def size(self) -> int:
        """Number of active ids."""
        return int(self.ids.numel())

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` logits over the active ids (float32 when quantized)."""
        best = []
        for start in range(0, self.size, self.chunk_rows):
            best.append(self._chunk(hidden, start, start + self.chunk_rows))
        return torch.cat(best, dim=-1)

    def argmax(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary ids of the best active token per row (``[B]``, long), computed
        chunk by chunk with a running maximum."""
        best_val: torch.Tensor | None = None
        best_idx: torch.Tensor | None = None
        for start in range(0, self.size, self.chunk_rows):
            part = self._chunk(hidden, start, start + self.chunk_rows)
            val, idx = part.max(dim=-1)
            idx = idx + start
            if best_val is None or best_idx is None:
                best_val, best_idx = val, idx
            else:
                better = val > best_val  # ties keep the earlier (lower) index, like argmax
                best_val = torch.where(better, val, best_val)
                best_idx = torch.where(better, idx, best_idx)
        assert best_idx is not None
        return self.ids[best_idx]

    def _chunk(self, hidden: torch.Tensor, start: int, end: int) -> torch.Tensor:
        w = self.weight[start:end]
        if self.quant == "none":
            return hidden.to(w.dtype) @ w.t()
        assert self.scale is not None
        s = self.scale[start:end]
        if self.quant == "w8a16":
            return (hidden.float() @ w.float().t()) * s
        hq, hs = _quantize_act(hidden)
        return (hq @ w.float().t()) * hs[:, None] * s


__all__ = [
    "QUANT_MODES",
    "ActiveVocabError",
    "DraftHead",
    "active_ids",
    "quantize_rows_int8",
    "read_ids_file",
]
