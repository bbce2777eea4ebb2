"""K channel backport for vllm-ascend proposers.

vllm-ascend release lines v0.18..v0.26 (and the vLLM-Ascend-HUST line) call
``drafter._propose(..., scheduler_output=scheduler_output, ...)`` without a K argument and
always draft ``self.num_speculative_tokens``. The backport reads gamma from that
``scheduler_output`` (``num_spec_tokens_to_schedule``, set by the scheduler hook) and drafts
exactly gamma tokens. Lines whose ``_propose`` already takes ``num_speculative_tokens`` are
left alone but for ``sync`` gamma 0, where their K = 0 path skips the drafter. Which case
applies is read from the host's own signature, never a version.

Runs on every worker (TP rank); it only reads the scheduler output all ranks share.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from vllm_hust_vspec.host.abi.requirements import K_PARAM, SCHED_OUT_PARAM
from vllm_hust_vspec.host.patching import Patcher, PatchError
from vllm_hust_vspec.host.wire import SKIP_ATTR
from vllm_hust_vspec.host.worker.k_channel import (
    MAX_K_ATTR,
    clamp_gamma,
    drafting_steps,
    max_k_of,
    reads_stride_max_k,
    requested_gamma,
    takes_k,
    to_width,
)

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")

# Per-instance: {gamma: runnable} draft graphs captured for that gamma (see graphs.py).
GAMMA_RUNNABLES_ATTR = "_vspec_gamma_runnables"

NATIVE = "native"
BACKPORT = "backport"


def _batch_size(kwargs: dict[str, Any]) -> int:
    cad = kwargs.get("common_attn_metadata")
    if cad is not None and hasattr(cad, "batch_size"):
        return int(cad.batch_size())
    next_ids = kwargs.get("next_token_ids")
    return int(next_ids.shape[0]) if next_ids is not None else 0


def _empty(kwargs: dict[str, Any], batch: int) -> Any:
    import torch

    ref = kwargs.get("target_token_ids")
    device = ref.device if ref is not None else None
    return torch.empty(batch, 0, dtype=torch.int64, device=device)


def _graph_bakes_k(proposer: Any) -> bool:
    """True when the merged draft runs as a captured graph (K fixed at capture)."""
    runnable = getattr(proposer, "_runnable", None)
    return type(runnable).__name__ == "ACLGraphWrapper"


def make_propose_backport(
    original: Callable[..., Any], gamma0_mode: Callable[[], str]
) -> Callable[..., Any]:
    """Wrap a K-less ``_propose`` so it drafts the scheduler's gamma.

    * gamma comes from ``scheduler_output`` (``num_spec_tokens_to_schedule``), or from a
      ``num_speculative_tokens=`` keyword a K-native runner passes.
    * gamma == max K: the original call, untouched.
    * 0 < gamma < max K: the proposer's step attributes (``num_speculative_tokens`` and, on
      vLLM-Ascend-HUST, ``num_draft_steps``) are gamma for this call (the loops and output
      width follow them; buffers stay sized for max K) and restored after. When the merged
      draft is a captured graph with K baked in, a graph captured for gamma is used if one
      was registered, else the draft runs at max K and is truncated to gamma (correct; only
      the verify width shrinks).
    * gamma == 0: ``sticky`` (or the scheduler's skip flag) returns ``[B, 0]`` without
      drafting; ``sync`` drafts one token to keep the draft KV cache in step, then drops it.
    * async scheduling on a runner that reads drafts with row stride max K (vLLM 0.23): the
      ``[B, gamma]`` drafts are zero-padded to ``[B, max K]``
      (:func:`~vllm_hust_vspec.host.worker.k_channel.reads_stride_max_k`).
    """

    def _propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            # The runner passes everything by keyword; a positional call is a host we do not
            # know, so do not guess which argument is which.
            return original(self, *args, **kwargs)
        max_k = max_k_of(self)
        sched = kwargs.get(SCHED_OUT_PARAM)
        # A runner of the K-native shape calling this K-less _propose (vLLM-Ascend-HUST
        # builds whose runner and proposer disagree) hands gamma as a keyword the original
        # does not take: it is the step's gamma.
        asked = kwargs.pop(K_PARAM, None)
        gamma = requested_gamma(sched, max_k) if asked is None else clamp_gamma(asked, max_k)
        if gamma == max_k:
            return original(self, **kwargs)
        runner = getattr(self, "runner", None)
        async_on = bool(getattr(self, "use_async_scheduling", False))
        width = max_k if runner is not None and reads_stride_max_k(runner, async_on) else None
        if gamma == 0:
            if gamma0_mode() != "sync" or getattr(sched, SKIP_ATTR, False):
                empty = _empty(kwargs, _batch_size(kwargs))
                return empty if width is None else to_width(empty, 0, width)
            run_k, keep = 1, 0
        else:
            run_k, keep = gamma, gamma
        graphs = self.__dict__.get(GAMMA_RUNNABLES_ATTR) or {}
        saved_runnable = None
        if _graph_bakes_k(self):
            if run_k in graphs:
                saved_runnable = self._runnable
                self._runnable = graphs[run_k]
            else:
                run_k = max_k
        try:
            with drafting_steps(self, run_k):
                out = original(self, **kwargs)
        finally:
            if saved_runnable is not None:
                self._runnable = saved_runnable
        return to_width(out, keep, keep if width is None else width)

    _propose.__vspec_backport__ = True  # type: ignore[attr-defined]
    return _propose


def make_native_sync_zero(original: Callable[..., Any]) -> Callable[..., Any]:
    """``sync`` gamma 0 on a K-taking ``_propose``: the host returns ``[B, 0]`` at K = 0
    without running the drafter, so the draft KV cache would miss the step's tokens. Draft one
    token instead (the drafter's first pass covers them) and hand back none, as the backport
    does; a step the scheduler marked to skip (sticky) keeps the host's K = 0 path."""

    def _propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs.get(K_PARAM) != 0 or getattr(kwargs.get(SCHED_OUT_PARAM),
                                                        SKIP_ATTR, False):
            return original(self, *args, **kwargs)
        kwargs[K_PARAM] = 1
        return original(self, **kwargs)[:, :0]

    return _propose


def make_truncating_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """For a proposer with its own K-less ``_propose`` (Step3p5 MTP): draft max K as before,
    hand back only the scheduler's gamma (verification shrinks; draft cost does not)."""

    def _propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        max_k = int(out.shape[1]) if hasattr(out, "shape") and out.ndim == 2 else None
        if max_k is None:
            return out
        gamma = requested_gamma(kwargs.get(SCHED_OUT_PARAM), max_k)
        return out if gamma == max_k else out[:, :gamma]

    return _propose


def install_proposer(
    patcher: Patcher,
    base_cls: type,
    gamma0_mode: Callable[[], str],
    extra_k_less: tuple[type, ...] = (),
) -> str:
    """Patch ``base_cls._propose`` when it lacks K; return ``"native"`` or ``"backport"``.

    A K-taking ``_propose`` is left as it is, except in ``sync`` gamma-0 mode
    (:func:`make_native_sync_zero`).

    ``extra_k_less``: subclasses with their own ``_propose`` (Step3p5) that get the
    truncating wrapper when their ``_propose`` lacks K.
    """
    fn = vars(base_cls).get("_propose")
    if fn is None:
        raise PatchError(
            f"vSpec cannot find {base_cls.__module__}.{base_cls.__qualname__}._propose "
            f"(host version not supported; run vllm-hust-vspec-doctor)"
        )
    if takes_k(fn):
        if gamma0_mode() == "sync":
            patcher.wrap(base_cls, "_propose", make_native_sync_zero)
        return NATIVE
    if SCHED_OUT_PARAM not in inspect.signature(fn).parameters:
        raise PatchError(
            f"vSpec: {base_cls.__qualname__}._propose takes neither {K_PARAM} nor "
            f"{SCHED_OUT_PARAM}; gamma cannot reach the drafter on this host"
        )
    patcher.wrap(base_cls, "_propose", lambda orig: make_propose_backport(orig, gamma0_mode))
    for cls in extra_k_less:
        own = vars(cls).get("_propose")
        if own is not None and not takes_k(own):
            patcher.wrap(cls, "_propose", make_truncating_wrapper)
    return BACKPORT


__all__ = [
    "BACKPORT",
    "GAMMA_RUNNABLES_ATTR",
    "MAX_K_ATTR",
    "NATIVE",
    "install_proposer",
    "make_native_sync_zero",
    "make_propose_backport",
    "make_truncating_wrapper",
    "requested_gamma",
    "takes_k",
]
