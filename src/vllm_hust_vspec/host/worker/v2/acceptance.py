"""Relaxed acceptance on Model Runner V2's rejection path (worker process).

V2 verifies in ``gpu/spec_decode/rejection_sampler.py``: ``RejectionSampler._verify`` calls
the module-level ``rejection_sample(target_logits, draft_logits, draft_sampled,
cu_num_logits, pos, idx_mapping, expanded_idx_mapping, expanded_local_pos, temperature, seed,
num_speculative_steps, synthetic_conditional_rates, ...)`` (a Triton kernel) and gets back
``sampled [num_reqs, K + 1]`` and ``num_sampled [num_reqs]``. Its layout, read from the
kernel: request ``r`` owns logits rows ``cu[r] .. cu[r+1]-1`` (its drafts plus the bonus row);
the draft verified by row ``cu[r] + i`` is ``draft_sampled[cu[r] + i + 1]``; -1 marks a draft
that must be rejected; a greedy row stores the kept drafts, then the target argmax.

As on the V1 runner (host/worker/v1/acceptance.py), strict mode patches nothing. With a relaxed
mode:

* ``GPUModelRunner.sample`` publishes, for the duration of the call, the acceptance parameters
  (the target's EOS ids when protected) and each request's prompt length, from which the
  tokens generated so far follow (``pos`` of its first row + 1 - prompt length);
* ``rejection_sample`` runs vLLM's kernel first, then replaces the rows of greedy requests by
  :func:`~vllm_hust_vspec.backends.acceptance.greedy_accept` on the same processed logits
  (drafts cut at the first -1, as the kernel rejects there). Sampled requests keep vLLM's
  exact result; synthetic acceptance and calls outside ``sample`` are left to vLLM.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.backends.acceptance import AcceptanceParams, greedy_accept
from vllm_hust_vspec.host.abi.host_facts import V2_RUNNER, v2_runner_available
from vllm_hust_vspec.host.patching import Patcher, resolve
from vllm_hust_vspec.host.worker.v1.acceptance import acceptance_params, describe, eos_token_ids

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

V2_REJECTION_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"


@dataclass(frozen=True)
class V2VerifyContext:
    """What one V2 verification needs beyond rejection_sample's own arguments."""

    params: AcceptanceParams
    prompt_len: Any  # [max_num_reqs] tensor indexed by request state, or None


_CONTEXT: contextvars.ContextVar[V2VerifyContext | None] = contextvars.ContextVar(
    "vspec_verify_v2", default=None
)


def _prompt_len(runner: Any) -> Any:
    try:
        return runner.req_states.prompt_len.gpu
    except AttributeError:
        return None


def _make_sample_wrapper(
    get_params: Callable[[], AcceptanceParams], protect_eos: Callable[[], bool]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def sample(self: Any, *args: Any, **kwargs: Any) -> Any:
            params = get_params()
            if params.strict:
                return orig(self, *args, **kwargs)
            if protect_eos():
                params = params.with_protected(eos_token_ids(getattr(self, "model_config", None)))
            token = _CONTEXT.set(V2VerifyContext(params, _prompt_len(self)))
            try:
                return orig(self, *args, **kwargs)
            finally:
                _CONTEXT.reset(token)

        return sample

    return make


def relax_greedy_rows(
    sampled: Any, num_sampled: Any, target_logits: Any, draft_sampled: Any,
    cu_num_logits: Any, pos: Any, idx_mapping: Any, temperature: Any,
    params: AcceptanceParams, prompt_len: Any = None,
) -> None:
    """Overwrite, in place, the greedy requests' rows of V2's ``(sampled, num_sampled)`` with
    the relaxed verification of the same drafts and logits."""
    import torch

    greedy = (temperature[idx_mapping] == 0).tolist()
    rows = [r for r, g in enumerate(greedy) if g]
    if not rows:
        return
    cu = cu_num_logits.tolist()
    draft_parts, logit_rows, bonus_rows, counts = [], [], [], []
    for r in rows:
        start, end = cu[r], cu[r + 1]
        drafts = draft_sampled[start + 1:end]
        valid = int((drafts >= 0).to(torch.int32).cumprod(0).sum()) if drafts.numel() else 0
        draft_parts.append(drafts[:valid])
        logit_rows.append(torch.arange(start, start + valid, device=target_logits.device))
        bonus_rows.append(start + valid)
        counts.append(valid)
    drafts_all = torch.cat(draft_parts).to(torch.long)
    logits = target_logits[torch.cat(logit_rows)]
    bonus = target_logits[torch.tensor(bonus_rows, device=target_logits.device)].argmax(-1)
    done = None
    if prompt_len is not None:
        first = pos[torch.tensor([cu[r] for r in rows], device=pos.device)]
        done = (first + 1 - prompt_len[idx_mapping[rows]].to(first.dtype)).tolist()
    width = sampled.shape[1] - 1
    out = greedy_accept(drafts_all, counts, logits, bonus, params, max_spec_len=width,
                        num_output_tokens=done)
    n = (out >= 0).sum(dim=1)
    index = torch.tensor(rows, device=sampled.device)
    keep = torch.arange(width + 1, device=out.device).unsqueeze(0) < n.unsqueeze(1)
    sampled[index] = torch.where(keep.to(sampled.device), out.to(sampled.device, sampled.dtype),
                                 sampled[index])
    num_sampled[index] = n.to(num_sampled.device, num_sampled.dtype)


def make_rejection_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap V2's ``rejection_sample`` (signature kept)."""

    def rejection_sample(
        target_logits: Any, draft_logits: Any, draft_sampled: Any, cu_num_logits: Any,
        pos: Any, idx_mapping: Any, expanded_idx_mapping: Any, expanded_local_pos: Any,
        temperature: Any, seed: Any, num_speculative_steps: int, *args: Any, **kwargs: Any,
    ) -> Any:
        sampled, num_sampled = original(
            target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
            expanded_idx_mapping, expanded_local_pos, temperature, seed,
            num_speculative_steps, *args, **kwargs,
        )
        ctx = _CONTEXT.get()
        synthetic = kwargs.get("synthetic_conditional_rates", args[0] if args else None)
        if ctx is None or ctx.params.strict or synthetic is not None:
            return sampled, num_sampled
        relax_greedy_rows(sampled, num_sampled, target_logits, draft_sampled, cu_num_logits,
                          pos, idx_mapping, temperature, ctx.params, ctx.prompt_len)
        return sampled, num_sampled

    return rejection_sample


def install_acceptance_v2(patcher: Patcher, get_settings: Callable[[], Settings]) -> bool:
    """Patch V2's rejection path when a relaxed mode is configured and V2 exists."""
    params = acceptance_params(get_settings())
    if params.strict or not v2_runner_available():
        return False
    module = importlib.import_module(V2_REJECTION_MODULE)
    runner_cls = resolve(*V2_RUNNER)

    def get_params() -> AcceptanceParams:
        return acceptance_params(get_settings())

    def protect_eos() -> bool:
        return bool(get_settings().acceptance_protect_eos)

    patcher.wrap(runner_cls, "sample", _make_sample_wrapper(get_params, protect_eos))
    patcher.wrap(module, "rejection_sample", make_rejection_wrapper)
    logger.info("vSpec: relaxed acceptance (%s) wired into Model Runner V2's rejection "
                "sampler", describe(params))
    return True


__all__ = [
    "V2_REJECTION_MODULE",
    "V2VerifyContext",
    "install_acceptance_v2",
    "make_rejection_wrapper",
    "relax_greedy_rows",
]
