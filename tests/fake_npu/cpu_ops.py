"""CPU reference implementations of the few NPU attention ops whose math is plain.

``npu_fused_infer_attention_score`` (FIA) in the ``TND`` layout vllm-ascend uses, with or
without a paged KV cache, and ``_npu_reshape_and_cache`` (scatter K/V into the paged cache).
They follow the torch_npu argument conventions vllm-ascend calls them with:

* ``query``: ``[T, N, D]``; ``actual_seq_lengths``: cumulative query ends per request;
* paged KV (``block_table`` given): ``key``/``value`` are ``[num_blocks, block_size, Nkv*D]``
  views of the cache, ``actual_seq_lengths_kv`` are per-request KV lengths;
* unpaged KV (``block_table is None``): ``key``/``value`` are ``[T, Nkv, D]`` and
  ``actual_seq_lengths_kv`` are cumulative like the query's;
* ``sparse_mode`` 0: no mask; 2/3: causal, right-aligned (query token j of a request with q
  query tokens and L KV tokens sees KV positions ``< L - q + j + 1``); 4: causal band of
  ``pre_tokens``.

Returns ``(attn_out [T, N, D], softmax_lse [T, N, 1])``. The workspace queries return a
1-byte tensor: CPU needs no scratch space, but vllm-ascend stores the workspace per graph
size, so a real tensor keeps that bookkeeping intact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.tolist()]
    return [int(v) for v in x]


def _starts(cum: Sequence[int]) -> list[int]:
    return [0, *cum[:-1]]


def fused_infer_attention_score(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                *args: Any, atten_mask: Any = None,
                                block_table: torch.Tensor | None = None,
                                input_layout: str = "TND", block_size: int = 128,
                                actual_seq_lengths: Any = None,
                                actual_seq_lengths_kv: Any = None,
                                num_key_value_heads: int = 0, num_heads: int = 1,
                                scale: float = 1.0, sparse_mode: int = 0,
                                pre_tokens: int = 2**31 - 1, next_tokens: int = 2**31 - 1,
                                workspace: Any = None, out: Any = None, **kwargs: Any
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    if input_layout != "TND":
        raise NotImplementedError(
            f"fake NPU: npu_fused_infer_attention_score layout {input_layout} has no CPU "
            "equivalent here (only TND)")
    unsupported = sorted(k for k in kwargs
                         if k.endswith("antiquant_scale") or k == "learnable_sink")
    if unsupported:
        raise NotImplementedError(
            f"fake NPU: npu_fused_infer_attention_score({', '.join(unsupported)}) has no CPU "
            "equivalent")
    n = num_heads
    nkv = num_key_value_heads or n
    d = query.shape[-1]
    q_cum = _as_list(actual_seq_lengths)
    kv_lens = _as_list(actual_seq_lengths_kv)
    if not q_cum:
        q_cum = [query.shape[0]]
    if block_table is None:
        kv_cum = kv_lens or q_cum
        kv_starts = _starts(kv_cum)
        kv_lens = [e - s for s, e in zip(kv_starts, kv_cum, strict=True)]
    attn = torch.zeros(query.shape[0], n, d, dtype=query.dtype)
    lse = torch.full((query.shape[0], n, 1), float("-inf"), dtype=torch.float32)
    for i, (qs, qe) in enumerate(zip(_starts(q_cum), q_cum, strict=True)):
        q_len, kv_len = qe - qs, kv_lens[i] if i < len(kv_lens) else 0
        if q_len <= 0 or kv_len <= 0:
            continue
        if block_table is not None:
            blocks = block_table[i, : (kv_len + block_size - 1) // block_size].long()
            k = key[blocks].reshape(-1, nkv, d)[:kv_len]
            v = value[blocks].reshape(-1, nkv, d)[:kv_len]
        else:
            k = key[kv_starts[i]: kv_starts[i] + kv_len].reshape(kv_len, nkv, d)
            v = value[kv_starts[i]: kv_starts[i] + kv_len].reshape(kv_len, nkv, d)
        q = query[qs:qe].float()                                   # [q, N, D]
        k = k.float().repeat_interleave(n // nkv, dim=1)           # [L, N, D]
        v = v.float().repeat_interleave(n // nkv, dim=1)
        scores = torch.einsum("qnd,lnd->nql", q, k) * scale        # [N, q, L]
        if sparse_mode in (2, 3, 4):
            qpos = torch.arange(q_len).unsqueeze(1) + (kv_len - q_len)
            kpos = torch.arange(kv_len).unsqueeze(0)
            allowed = kpos <= qpos
            if sparse_mode == 4:
                allowed &= kpos > qpos - pre_tokens
            scores = scores.masked_fill(~allowed, float("-inf"))
        lse_i = torch.logsumexp(scores, dim=-1)                     # [N, q]
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        attn[qs:qe] = torch.einsum("nql,lnd->qnd", probs, v).to(query.dtype)
        lse[qs:qe, :, 0] = lse_i.transpose(0, 1)
    if out is not None:
        o, s = out
        if o.numel() == attn.numel():
            o.view(attn.shape).copy_(attn)
        else:
            o[: attn.shape[0]].copy_(attn)
        if s is not None and s.numel() == lse.numel():
            s.view(lse.shape).copy_(lse.to(s.dtype))
        return o, s
    return attn, lse.to(query.dtype)


def fused_infer_attention_score_workspace(*args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.empty(1, dtype=torch.uint8)


def reshape_and_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                      value_cache: torch.Tensor, slot_indices: torch.Tensor) -> None:
    """Write token i's K/V to cache slot ``slot_indices[i]`` (negative: padding, skipped)."""
    slots = slot_indices.long().flatten()[: key.shape[0]]
    keep = slots >= 0
    if not bool(keep.any()):
        return
    nb, bs = key_cache.shape[:2]
    kc = key_cache.view(nb * bs, -1)
    vc = value_cache.view(nb * bs, -1)
    rows = int(keep.sum())
    kc[slots[keep]] = key[: slots.shape[0]][keep].reshape(rows, kc.shape[1]).to(kc.dtype)
    vc[slots[keep]] = value[: slots.shape[0]][keep].reshape(rows, vc.shape[1]).to(vc.dtype)
