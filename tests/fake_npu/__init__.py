"""Fake NPU for CPU-only machines: enough of ``torch_npu`` (and the ACL graph API) for
vllm-ascend's runner, spec-decode and graph bookkeeping code to import and partly execute.

    from fake_npu import install
    fake = install()          # before importing vllm_ascend
    ...
    fake.graph_log.captures   # what ACLGraphWrapper / NPUGraph captured
    fake.graph_log.replays    # what was replayed

What ``install`` does (idempotent, process-wide, meant for a subprocess):

1. ``torch_npu`` and its submodules, ``acl``: the stub in :mod:`fake_npu.torch_npu_stub`;
   ``torch.npu`` registered as the fake device module (PrivateUse1 renamed to ``npu``);
   NPU memory is CPU memory (``device="npu"`` -> ``cpu``, no pinning, ``PrivateUse1``
   kernels mirrored to ``CPU``, ``torch.accelerator`` routed to the fake).
2. ``triton`` hidden (``sys.modules["triton"] = None``): triton-ascend is NPU-only and the
   CUDA triton wheel of the base venv has no driver here, so vLLM's own ``TritonPlaceholder``
   is used (``vllm.triton_utils.HAS_TRITON`` is False) and vllm-ascend's triton kernels stay
   undecorated Python functions that are never launched.
3. torchvision schema shim: the registry's torchvision wheel is a CUDA build whose ``_C.so``
   cannot load on a CPU-only torch; torchvision then fails at import on an unguarded
   ``register_fake("torchvision::nms")``. Declaring the two op schemas (no kernels) lets its
   pure-Python parts (``transforms.v2``, needed by transformers' image processors that
   vLLM's model files import) load. Calling ``torchvision.ops.nms`` still fails.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType

from . import acl_graph, torch_npu_stub
from .acl_graph import LOG as graph_log
from .acl_graph import FakeNPUGraph, GraphLog, replaying
from .torch_npu_stub import MISSING_CALLS, MissingOp

__all__ = ["FakeNPU", "FakeNPUGraph", "GraphLog", "MISSING_CALLS", "MissingOp", "acl_graph",
           "graph_log", "install", "replaying", "torch_npu_stub"]


@dataclass
class FakeNPU:
    torch_npu: ModuleType
    npu: ModuleType
    graph_log: GraphLog
    missing_calls: list[str]


_TORCHVISION_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_tv_lib = None


def _torchvision_shim() -> None:
    global _tv_lib
    if _tv_lib is not None or "torchvision" in sys.modules:
        return
    import torch

    try:
        torch.ops.torchvision.nms  # noqa: B018  (a real, loadable torchvision _C)
        return
    except (AttributeError, RuntimeError):
        pass
    _tv_lib = torch.library.Library("torchvision", "FRAGMENT")
    for schema in _TORCHVISION_SCHEMAS:
        _tv_lib.define(schema)


def install(*, hide_triton: bool = True, torchvision_shim: bool = True) -> FakeNPU:
    if hide_triton and "triton" not in sys.modules:
        sys.modules["triton"] = None  # type: ignore[assignment]
    if torchvision_shim:
        _torchvision_shim()
    tnpu = torch_npu_stub.install()
    return FakeNPU(torch_npu=tnpu, npu=tnpu.npu, graph_log=graph_log,
                   missing_calls=MISSING_CALLS)
