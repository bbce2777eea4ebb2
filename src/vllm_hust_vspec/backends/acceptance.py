"""Greedy acceptance of draft tokens, host independent (pure torch, any device).

One function decides which draft tokens a greedy verification step keeps, for every host's
rejection path (upstream ``RejectionSampler``, vllm-ascend's ``AscendRejectionSampler``):

* strict (default): a draft token is kept while it equals the target's argmax; the first
  mismatch is replaced by the target's argmax; if all are kept a bonus token follows.
  Bit-identical to target-only greedy decoding.
* relaxed top-K (EAGLE, opt-in): also keep a draft token that is among the target's top-K.
* confidence margin (opt-in): also keep a draft token whose target probability is within
  ``margin`` of the target's top-1 probability.

Relaxed rules never apply to protected token ids (e.g. EOS, digits: neither accepted
relaxedly nor overriding a protected target choice), to draft positions before
``from_position``, or to requests with fewer than ``after_tokens`` generated tokens.
Relaxed modes change outputs; sampling (temperature > 0) is never routed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

PLACEHOLDER = -1


@dataclass(frozen=True)
class AcceptanceParams:
    """Which rules may keep a draft token that is not the target's argmax."""

    topk: int | None = None  # relaxed top-K (K >= 2)
    margin: float | None = None  # confidence margin in probability
    from_position: int = 0  # relaxed only at draft positions >= this
    after_tokens: int = 0  # relaxed only once a request generated this many tokens
    protected_token_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def strict(self) -> bool:
        """True when only exact argmax matches are accepted."""
        return self.topk is None and self.margin is None


STRICT = AcceptanceParams()


def params_from_settings(settings: Any, method: str | None = None) -> AcceptanceParams:
    """Acceptance parameters for vSpec settings (relaxed top-K only for EAGLE methods)."""
    method = method or getattr(settings, "method", None)
    topk = getattr(settings, "eagle_relaxed_accept_topk", None)
    if method not in ("eagle", "eagle3"):
        topk = None
    margin = getattr(settings, "confidence_accept_margin", None)
    protected = getattr(settings, "confidence_protected_token_ids", None) or ()
    return AcceptanceParams(
        topk=topk,
        margin=margin,
        from_position=int(getattr(settings, "confidence_accept_from_position", 0) or 0),
        after_tokens=int(
            getattr(settings, "eagle_relaxed_accept_after_tokens", 0)
            or getattr(settings, "confidence_accept_after_tokens", 0)
            or 0
        ),
        protected_token_ids=frozenset(int(t) for t in protected),
    )


def accept_mask(
    draft_token_ids: torch.Tensor,
    target_logits: torch.Tensor,
    params: AcceptanceParams,
    eligible: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per draft token: (kept?, target argmax). ``eligible`` masks where relaxed rules apply."""
    target_argmax = target_logits.argmax(dim=-1)
    keep = draft_token_ids == target_argmax
    if params.strict or draft_token_ids.numel() == 0:
        return keep, target_argmax
    relaxed = torch.zeros_like(keep)
    if params.topk is not None:
        top = target_logits.topk(min(params.topk, target_logits.shape[-1]), dim=-1).indices
        relaxed |= (top == draft_token_ids.unsqueeze(-1)).any(dim=-1)
    if params.margin is not None:
        probs = target_logits.float().softmax(dim=-1)
        p_top = probs.gather(-1, target_argmax.unsqueeze(-1)).squeeze(-1)
        p_draft = probs.gather(-1, draft_token_ids.long().unsqueeze(-1)).squeeze(-1)
        relaxed |= (p_top - p_draft) <= params.margin
    if params.protected_token_ids:
        ids = torch.tensor(sorted(params.protected_token_ids), device=draft_token_ids.device)
        protected = torch.isin(draft_token_ids, ids) | torch.isin(target_argmax, ids)
        relaxed &= ~protected
    if eligible is not None:
        relaxed &= eligible
    return keep | relaxed, target_argmax


def greedy_accept(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: Sequence[int],
    target_logits: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    params: AcceptanceParams = STRICT,
    *,
    max_spec_len: int | None = None,
    num_output_tokens: Sequence[int] | None = None,
) -> torch.Tensor:
    """Output tokens of a greedy verification step, ragged per request.

    Args:
        draft_token_ids: ``[T]`` drafts of all requests, concatenated.
        num_draft_tokens: drafts per request (``B`` entries, sum ``T``; 0 allowed).
        target_logits: ``[T, V]`` target logits at each draft position.
        bonus_token_ids: ``[B]`` or ``[B, 1]`` token appended when every draft is kept.
        max_spec_len: output width minus one (default: the largest draft count).
        num_output_tokens: tokens each request has generated so far (for ``after_tokens``;
            None makes every request ineligible for relaxed rules when ``after_tokens > 0``).

    Returns:
        ``[B, max_spec_len + 1]`` int32: kept drafts, then the correction or bonus token,
        then ``-1`` placeholders (the layout vLLM's samplers return).
    """
    counts = torch.as_tensor(list(num_draft_tokens), dtype=torch.long,
                             device=draft_token_ids.device)
    batch = counts.numel()
    width = int(max_spec_len if max_spec_len is not None else (counts.max() if batch else 0))
    out = torch.full((batch, width + 1), PLACEHOLDER, dtype=torch.int32,
                     device=draft_token_ids.device)
    if batch == 0:
        return out
    bonus = bonus_token_ids.reshape(-1).to(out.dtype)
    total = int(counts.sum())
    if total == 0:
        out[:, 0] = bonus
        return out
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(width, device=counts.device).unsqueeze(0)  # [1, L]
    valid = pos < counts.unsqueeze(1)  # [B, L]
    idx = (starts.unsqueeze(1) + pos).clamp(max=total - 1)  # [B, L]

    eligible = None
    if not params.strict:
        req_of = torch.repeat_interleave(torch.arange(batch, device=counts.device), counts)
        pos_of = torch.arange(total, device=counts.device) - starts[req_of]
        eligible = pos_of >= params.from_position
        if params.after_tokens > 0:
            if num_output_tokens is None:
                eligible = torch.zeros_like(eligible)
            else:
                done = torch.as_tensor(list(num_output_tokens), device=counts.device)
                eligible &= done[req_of] >= params.after_tokens
    keep, argmax = accept_mask(draft_token_ids, target_logits, params, eligible)

    kept = keep[idx] & valid  # [B, L]
    n_kept = kept.to(torch.int32).cumprod(dim=1).sum(dim=1)  # leading run of kept drafts
    drafts = draft_token_ids[idx].to(out.dtype)
    fixes = argmax[idx].to(out.dtype)
    body = torch.where(pos < n_kept.unsqueeze(1), drafts, out[:, :width])
    rejected_here = (pos == n_kept.unsqueeze(1)) & (n_kept < counts).unsqueeze(1)
    out[:, :width] = torch.where(rejected_here, fixes, body)
    all_kept = n_kept == counts
    rows = torch.nonzero(all_kept).reshape(-1)
    out[rows, counts[rows]] = bonus[rows]
    return out


def accepted_lengths(output_token_ids: torch.Tensor) -> torch.Tensor:
    """Accepted drafts per request from an output of :func:`greedy_accept` (``[B]``)."""
    return (output_token_ids != PLACEHOLDER).sum(dim=1) - 1


__all__ = [
    "STRICT",
    "AcceptanceParams",
    "accept_mask",
    "accepted_lengths",
    "greedy_accept",
    "params_from_settings",
]
