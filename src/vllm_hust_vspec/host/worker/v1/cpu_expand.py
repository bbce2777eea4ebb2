"""A correct ``expand_batch_to_tokens`` for vLLM's CPU platform without Triton.

There vLLM routes the rejection sampler's ``expand_kernel`` to a C++ shim
(``vllm/utils/cpu_triton_utils.py: _expand_kernel_impl``) that fills an int64 copy of the
output and never writes the caller's float32/int32 buffer. ``apply_sampling_constraints`` then
divides every row's target logits, greedy rows included, by uninitialised memory taken as the
per-token temperature, and greedy requests batched with sampled ones emit wrong tokens
(upstream vllm-project/vllm#55005, fix proposed in #55006; docs/hosts.md). vSpec promises token
identity, so on that platform it replaces the function with a plain-torch expansion.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from vllm_hust_vspec.host.patching import Patcher

logger = logging.getLogger("vllm_hust_vspec.host")

REJECTION_MODULE = "vllm.v1.sample.rejection_sampler"
FUNCTION = "expand_batch_to_tokens"


def expand_batch_to_tokens(
    x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: int = 0, replace_to: int = 0
) -> Any:
    """``x = [a, b, c]``, ``cu_num_tokens = [2, 5, 6]`` -> ``[a, a, b, b, b, c]``, in ``x``'s
    dtype, with entries equal to ``replace_from`` set to ``replace_to`` (the upstream
    function's contract)."""
    import torch

    if cu_num_tokens.shape[0] != x.shape[0]:
        raise ValueError(f"cu_num_tokens has {cu_num_tokens.shape[0]} rows, x {x.shape[0]}")
    counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1)).long()
    if replace_from != replace_to:
        x = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(x, counts, output_size=num_tokens)


def host_needs_fix() -> bool:
    """True exactly where vLLM installs the broken shim: the CPU platform without Triton
    (``CpuPlatform.register_triton_kernel_overrides``)."""
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    return bool(current_platform.is_cpu()) and not HAS_TRITON


def install_cpu_expand_fix(patcher: Patcher) -> bool:
    """Replace the function when this host needs it; returns whether it did."""
    if not host_needs_fix():
        return False
    module = importlib.import_module(REJECTION_MODULE)
    patcher.patch(module, FUNCTION, expand_batch_to_tokens)
    logger.info("vSpec: replaced vLLM's CPU %s (greedy rows in mixed batches, vllm#55005)",
                FUNCTION)
    return True


__all__ = ["expand_batch_to_tokens", "host_needs_fix", "install_cpu_expand_fix"]
