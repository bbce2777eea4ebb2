"""Drafting the scheduler's gamma with a proposer that always drafts its configured K.

Worker side (every TP rank). Upstream vLLM >= 0.31 hands the step's K to the proposer
(``propose(num_speculative_tokens=...)``). Hosts without that channel (the vLLM-HUST core's
``SpecDecodeBaseProposer.propose``, the vLLM-Ascend release lines' ``_propose``) loop over
attributes fixed in ``__init__``: ``num_speculative_tokens`` and, on vLLM-Ascend-HUST,
``num_draft_steps`` (the tree depth, else K). The backport sets those to gamma for one call
and restores them, and hands back exactly ``gamma`` draft columns, zero-padded to max K where
the next async frame reads drafts with row stride max K. It only reads the scheduler output
every rank shares, so ranks cannot disagree.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vllm_hust_vspec.host.abi.requirements import K_PARAM
from vllm_hust_vspec.host.wire import K_FIELD

# Per proposer instance: the configured maximum K (buffers and graphs were sized for it).
MAX_K_ATTR = "_vspec_max_k"
# The proposer attributes a K-less drafter's loops and buffers read for its step count.
STEP_ATTRS = ("num_speculative_tokens", "num_draft_steps")
# Per proposer instance: which of STEP_ATTRS count K there (see _step_attrs).
STEP_ATTRS_ATTR = "_vspec_step_attrs"

_TAKES_K: dict[type, bool] = {}


def takes_k(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` has a ``num_speculative_tokens`` parameter."""
    try:
        return K_PARAM in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def propose_takes_k(proposer: Any) -> bool:
    """True when ``proposer.propose`` drafts the K it is given (cached per class)."""
    cls = type(proposer)
    known = _TAKES_K.get(cls)
    if known is None:
        known = _TAKES_K[cls] = takes_k(getattr(cls, "propose", None))
    return known


def requested_gamma(scheduler_output: Any, max_k: int) -> int:
    """Gamma the scheduler asked for this step, clamped to ``[0, max_k]``.

    A scheduler output without the field (no hook, or a fixed gamma) means the configured K.
    """
    return clamp_gamma(getattr(scheduler_output, K_FIELD, None), max_k)


def clamp_gamma(value: Any, max_k: int) -> int:
    """A requested gamma clamped to ``[0, max_k]``; None means the configured K."""
    if value is None:
        return max_k
    return max(0, min(int(value), max_k))


def max_k_of(proposer: Any) -> int:
    """The proposer's configured K, remembered on first sight (the attribute moves per call)."""
    max_k = proposer.__dict__.get(MAX_K_ATTR)
    if max_k is None:
        max_k = proposer.__dict__[MAX_K_ATTR] = int(proposer.num_speculative_tokens)
    return int(max_k)


def _step_attrs(proposer: Any) -> tuple[str, ...]:
    """The step attributes that count K on this proposer (those equal to max K at first
    sight: a tree's depth differs from K and is not one of them), remembered."""
    attrs = proposer.__dict__.get(STEP_ATTRS_ATTR)
    if attrs is None:
        max_k = max_k_of(proposer)
        attrs = proposer.__dict__[STEP_ATTRS_ATTR] = tuple(
            a for a in STEP_ATTRS if getattr(proposer, a, None) == max_k)
    return tuple(attrs)


@contextmanager
def drafting_steps(proposer: Any, steps: int) -> Iterator[None]:
    """Within the block the proposer drafts ``steps`` tokens: its step attributes are set to
    ``steps`` and restored after (blocks may nest)."""
    attrs = _step_attrs(proposer)
    saved = {a: getattr(proposer, a) for a in attrs}
    try:
        for attr in attrs:
            setattr(proposer, attr, steps)
        yield
    finally:
        for attr, value in saved.items():
            setattr(proposer, attr, value)


def to_width(out: Any, keep: int, width: int) -> Any:
    """The first ``keep`` draft columns of a ``[B, n]`` tensor, zero-padded to ``width``
    columns (never verified: the next step schedules ``keep`` drafts)."""
    out = out[:, :keep] if out.shape[1] != keep else out
    if width == keep:
        return out
    import torch

    pad = torch.zeros(out.shape[0], width - keep, dtype=out.dtype, device=out.device)
    return torch.cat([out, pad], dim=1)


def keep_first(out: Any, keep: int, width: int | None = None) -> Any:
    """``out`` cut to ``keep`` drafts per request: a tensor (padded to ``width`` when given)
    or the per-request lists of the n-gram and suffix proposers."""
    if isinstance(out, list):
        return [d[:keep] for d in out]
    return to_width(out, keep, keep if width is None else width)


def reads_stride_max_k(runner: Any, async_scheduling: bool | None = None) -> bool:
    """True when the next async frame reads this frame's drafts with row stride max K.

    Under async scheduling the runner copies the previous frame's draft tensor into the next
    frame's input ids on the device. Runners that remember the last draft width
    (``prev_num_spec_tokens``, vLLM >= 0.31) read ``[B, gamma]`` correctly; the others (the
    vLLM-HUST core, vLLM 0.23 under vLLM-Ascend) index it as ``prev_index * num_spec_tokens``
    and need drafts padded to max K. ``async_scheduling``: the caller's own flag (a proposer
    keeps one), else the runner's."""
    if async_scheduling is None:
        async_scheduling = bool(getattr(runner, "use_async_scheduling", False))
    return async_scheduling and not hasattr(runner, "prev_num_spec_tokens")


def run_at_gamma(proposer: Any, gamma: int, call: Callable[[], Any], *, sync_zero: bool,
                 width: int | None) -> Any:
    """Run ``call`` (the proposer's K-less drafting) so it drafts ``gamma`` tokens.

    * gamma == max K: ``call`` untouched (padded to ``width`` is then a no-op).
    * 0 < gamma < max K: the step attributes are gamma for the call.
    * gamma == 0 with ``sync_zero``: one token is drafted to keep the draft KV cache in step,
      then dropped. (Without it the caller skips the drafter and never gets here.)
    """
    max_k = max_k_of(proposer)
    if gamma >= max_k:
        return call()
    run_k, keep = (1, 0) if gamma == 0 else (gamma, gamma)
    if gamma == 0 and not sync_zero:
        raise ValueError("gamma 0 without sync_zero: the drafter must be skipped instead")
    with drafting_steps(proposer, run_k):
        out = call()
    return keep_first(out, keep, width)


# Per runner instance: the [max_num_reqs, max K] CPU buffer the sync draft copy fills.
FULL_CPU_ATTR = "_vspec_draft_cpu_full"


def make_draft_copy_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a runner's ``_copy_draft_token_ids_to_cpu`` so drafts of any width reach the
    scheduler as drafted.

    Runners before vLLM 0.31 (the vLLM-HUST core, vLLM-Ascend release lines) copy the
    ``[B, gamma]`` draft tensor into ``draft_token_ids_cpu[:B]``, a ``[max_num_reqs, max K]``
    buffer, and read it back whole: gamma 0 and 2..K-1 raise a shape error and gamma 1 is
    broadcast into every column (K drafts verified instead of 1). The buffer is narrowed to
    the drafts' width for the copy and the read-back that follows it; runners that slice the
    columns themselves (vLLM >= 0.31) read the same values either way."""

    def _copy_draft_token_ids_to_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        full = self.__dict__.get(FULL_CPU_ATTR)
        if full is None:
            full = getattr(self, "draft_token_ids_cpu", None)
            if full is None:
                return orig(self, *args, **kwargs)
            self.__dict__[FULL_CPU_ATTR] = full
        drafts = getattr(self, "_draft_token_ids", None)
        width = drafts.shape[1] if getattr(drafts, "ndim", 0) == 2 else full.shape[1]
        self.draft_token_ids_cpu = full if width == full.shape[1] else full[:, :width]
        return orig(self, *args, **kwargs)

    return _copy_draft_token_ids_to_cpu


__all__ = [
    "FULL_CPU_ATTR",
    "MAX_K_ATTR",
    "STEP_ATTRS",
    "clamp_gamma",
    "drafting_steps",
    "keep_first",
    "make_draft_copy_wrapper",
    "max_k_of",
    "propose_takes_k",
    "reads_stride_max_k",
    "requested_gamma",
    "run_at_gamma",
    "takes_k",
    "to_width",
]
