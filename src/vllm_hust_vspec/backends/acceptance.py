"""Greedy acceptance of draft tokens, host independent (pure torch, any device).

One function decides which draft tokens a greedy verification step keeps, for every host's
rejection path (upstream ``RejectionSampler``, vllm-ascend's ``AscendRejectionSampler``):

* strict (default): a draft token is kept while it equals the target's argmax; the first
  mismatch is replaced by the target's argmax; if all are kept a bonus token follows.
  Bit-identical to target-only greedy decoding.
* relaxed top-K (EAGLE, opt-in): also keep a draft token that is among the target's top-K.
* confidence margin (opt-in): also keep a draft token whose target logit is within ``margin``
  of the target's top-1 logit (``margin_unit="logit"``, the predecessor's unit), or whose
  target probability is within ``margin`` of the top-1 probability (``"prob"``).
* forced length (measurement only): keep exactly the first ``forced_length`` drafts whatever
  the target says, then the target's argmax; it times a chosen acceptance length.

Relaxed rules never apply to protected token ids (e.g. EOS, digits: neither accepted
relaxedly nor overriding a protected target choice), to draft positions before
``from_position``, or to the first ``after_tokens`` output tokens of a request (a draft at
position ``k`` of a request that has generated ``n`` tokens becomes output token ``n + k``).
Both limits can be given per mode (``topk_*`` / ``margin_*``); the plain fields apply to both.
Relaxed modes change outputs; sampling (temperature > 0) is never routed here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

PLACEHOLDER = -1


@dataclass(frozen=True)
class AcceptanceParams:
    """Which rules may keep a draft token that is not the target's argmax."""

    topk: int | None = None  # relaxed top-K (K >= 2)
    margin: float | None = None  # confidence margin, in margin_unit
    margin_unit: str = "logit"  # "logit" (target logits) or "prob" (target probabilities)
    from_position: int = 0  # relaxed only at draft positions >= this
    after_tokens: int = 0  # relaxed only once a request generated this many tokens
    protected_token_ids: frozenset[int] = field(default_factory=frozenset)
    # Per-mode overrides of from_position / after_tokens (None: use the shared field).
    topk_from_position: int | None = None
    topk_after_tokens: int | None = None
    margin_from_position: int | None = None
    margin_after_tokens: int | None = None
    forced_length: int | None = None  # measurement only: keep exactly this many drafts

    @property
    def strict(self) -> bool:
        """True when only exact argmax matches are accepted."""
        return self.topk is None and self.margin is None and self.forced_length is None

    def limits(self, mode: str) -> tuple[int, int]:
        """``(from_position, after_tokens)`` in force for ``mode`` ("topk" or "margin")."""
        if mode == "topk":
            pos, after = self.topk_from_position, self.topk_after_tokens
        elif mode == "margin":
            pos, after = self.margin_from_position, self.margin_after_tokens
        else:
            raise ValueError(f"unknown acceptance mode {mode!r}; use 'topk' or 'margin'")
        return (
            self.from_position if pos is None else pos,
            self.after_tokens if after is None else after,
        )

    def with_protected(self, token_ids: Sequence[int]) -> AcceptanceParams:
        """The same parameters with more protected token ids (e.g. the model's EOS)."""
        if self.strict or not token_ids:
            return self
        extra = frozenset(int(t) for t in token_ids if int(t) >= 0)
        return replace(self, protected_token_ids=self.protected_token_ids | extra)


STRICT = AcceptanceParams()


def params_from_settings(settings: Settings, method: str | None = None) -> AcceptanceParams:
    """Acceptance parameters for vSpec settings (relaxed top-K only for EAGLE methods).

    ``eagle_relaxed_accept_after_tokens`` limits the top-K mode;
    ``confidence_accept_from_position`` / ``confidence_accept_after_tokens`` limit the margin
    mode; ``confidence_protected_token_ids`` protects ids in both.
    """
    method = method or settings.method
    topk = settings.eagle_relaxed_accept_topk
    if method not in ("eagle", "eagle3"):
        topk = None
    margin, unit = settings.confidence_accept_margin, "logit"
    if settings.confidence_accept_prob_margin is not None:
        margin, unit = settings.confidence_accept_prob_margin, "prob"
    protected = settings.confidence_protected_token_ids or ()
    return AcceptanceParams(
        topk=topk,
        margin=margin,
        margin_unit=unit,
        protected_token_ids=frozenset(int(t) for t in protected),
        topk_after_tokens=int(settings.eagle_relaxed_accept_after_tokens or 0),
        margin_from_position=int(settings.confidence_accept_from_position or 0),
        margin_after_tokens=int(settings.confidence_accept_after_tokens or 0),
        forced_length=settings.forced_acceptance_length,
    )


def accept_mask(
    draft_token_ids: torch.Tensor,
    target_logits: torch.Tensor,
    params: AcceptanceParams,
    eligible: torch.Tensor | None = None,
    *,
    margin_eligible: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per draft token: (kept?, target argmax).

    ``eligible`` masks where relaxed rules apply (both modes); ``margin_eligible``, when
    given, replaces it for the margin mode.
    """
    target_argmax = target_logits.argmax(dim=-1)
    keep = draft_token_ids == target_argmax
    if params.strict or draft_token_ids.numel() == 0:
        return keep, target_argmax
    vocab = target_logits.shape[-1]
    # A draft id outside the target's vocabulary (a padded draft head) is never relaxed.
    in_vocab = (draft_token_ids >= 0) & (draft_token_ids < vocab)
    safe_ids = draft_token_ids.long().clamp(0, vocab - 1)
    relaxed = torch.zeros_like(keep)
    if params.topk is not None:
        top = target_logits.topk(min(params.topk, vocab), dim=-1).indices
        by_topk = (top == draft_token_ids.unsqueeze(-1)).any(dim=-1)
        relaxed |= by_topk if eligible is None else by_topk & eligible
    if params.margin is not None:
        scores = target_logits.float()
        if params.margin_unit == "prob":
            scores = scores.softmax(dim=-1)
        top = scores.gather(-1, target_argmax.unsqueeze(-1)).squeeze(-1)
        drafted = scores.gather(-1, safe_ids.unsqueeze(-1)).squeeze(-1)
        by_margin = (top - drafted) <= params.margin
        where = margin_eligible if margin_eligible is not None else eligible
        relaxed |= by_margin if where is None else by_margin & where
    if params.protected_token_ids:
        ids = torch.tensor(sorted(params.protected_token_ids), device=draft_token_ids.device)
        protected = torch.isin(draft_token_ids, ids) | torch.isin(target_argmax, ids)
        relaxed &= ~protected
    return keep | (relaxed & in_vocab), target_argmax


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

    eligible = margin_eligible = None
    if not params.strict:
        req_of = torch.repeat_interleave(torch.arange(batch, device=counts.device), counts)
        pos_of = torch.arange(total, device=counts.device) - starts[req_of]
        done = (
            None if num_output_tokens is None
            else torch.as_tensor(list(num_output_tokens), device=counts.device)[req_of]
        )
        eligible = _eligible(params.limits("topk"), pos_of, done)
        margin_eligible = _eligible(params.limits("margin"), pos_of, done)
    keep, argmax = accept_mask(
        draft_token_ids, target_logits, params, eligible, margin_eligible=margin_eligible
    )

    kept = keep[idx] & valid  # [B, L]
    if params.forced_length is not None:
        kept = (pos < params.forced_length) & valid
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


def _eligible(
    limits: tuple[int, int], pos_of: torch.Tensor, done: torch.Tensor | None
) -> torch.Tensor:
    """Where one relaxed mode may apply: draft position and output-token limits."""
    from_position, after_tokens = limits
    ok = pos_of >= from_position
    if after_tokens > 0:
        if done is None:  # unknown progress: stay strict rather than guess
            return torch.zeros_like(ok)
        ok &= (done + pos_of) >= after_tokens
    return ok


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
