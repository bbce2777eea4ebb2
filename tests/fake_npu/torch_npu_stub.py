"""A ``torch_npu`` stand-in for CPU-only machines.

Rules:

* NPU ops that are pure bookkeeping or pure math map to CPU torch: streams, events,
  ``synchronize``, device queries, memory stats (fixed fake numbers), ``npu_format_cast``
  (identity: CPU tensors have one format), ``_weak_ref_tensor`` (identity: no caching
  allocator pool to leak from), ``npu_rms_norm`` / ``npu_add_rms_norm`` / ``npu_swiglu`` /
  ``npu_fast_gelu`` / ``npu_prefetch`` (no-op), ``npu_fused_infer_attention_score`` (+ ``.out``)
  and ``_npu_reshape_and_cache`` (``cpu_ops``), the ACL graph classes (see ``acl_graph``).
* Every other op that vllm-ascend is known to call (fused attention, MoE dispatch, quant
  matmuls, HCCL, ATB, profiler, ...) exists as an attribute, so modules import, but raises
  ``NotImplementedError("fake NPU: <op> has no CPU equivalent")`` when called.
* A name that is neither raises ``AttributeError`` as a real module would, so
  ``hasattr(torch.npu, x)`` stays meaningful (vLLM's ``Platform.__getattr__`` relies on it).

``torch.npu`` is this module's :data:`npu` (registered the way torch_npu does it: the
PrivateUse1 backend is renamed to ``npu`` and the module registered as ``torch.npu``).
The fake NPU *is* the CPU: there is no PrivateUse1 allocator, so :class:`CpuBackedNpu` turns
``device="npu"`` into ``cpu`` and drops ``pin_memory``, ``Tensor.npu()`` returns the tensor,
kernels registered for ``PrivateUse1`` are mirrored to ``CPU`` and ``torch.accelerator`` is
routed here. Build runners on ``cpu``.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import itertools
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from . import acl_graph, cpu_ops

__version__ = "2.10.0.post4+fakecpu"
FAKE_TOTAL_MEMORY = 64 * 1024**3
# Everything that was called and had no CPU equivalent, in call order.
MISSING_CALLS: list[str] = []


class MissingOp:
    """An NPU op with no CPU equivalent: importable, annotatable, raises when called."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._children: dict[str, MissingOp] = {}

    def __repr__(self) -> str:
        return f"<fake NPU op {self._name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        MISSING_CALLS.append(self._name)
        raise NotImplementedError(f"fake NPU: {self._name} has no CPU equivalent")

    def __getattr__(self, attr: str) -> MissingOp:  # e.g. op.out, op.default
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr not in self._children:
            self._children[attr] = MissingOp(f"{self._name}.{attr}")
        return self._children[attr]

    def __or__(self, other: Any) -> Any:  # ``torch_npu.X | None`` in annotations
        return Any

    __ror__ = __or__


class StubModule(types.ModuleType):
    """A module whose listed missing names are :class:`MissingOp`; other names: AttributeError."""

    def __init__(self, name: str, missing: tuple[str, ...] = (), pattern: str | None = None):
        super().__init__(name)
        self.__spec__ = importlib.util.spec_from_loader(name, loader=None)
        self.__path__: list[str] = []
        self.__file__ = __file__
        self._missing = set(missing)
        self._pattern = re.compile(pattern) if pattern else None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr.startswith("_missing") or attr == "_pattern":
            raise AttributeError(attr)
        if attr in self._missing or (self._pattern and self._pattern.fullmatch(attr)):
            op = MissingOp(f"{self.__name__}.{attr}")
            setattr(self, attr, op)
            return op
        raise AttributeError(f"fake NPU: module {self.__name__!r} has no attribute {attr!r}")


# ------------------------------------------------------------------------------------------
# streams and events
# ------------------------------------------------------------------------------------------
_stream_ids = itertools.count(1)


class Stream:
    """``torch.npu.Stream``: CPU work is synchronous, so every wait is already satisfied."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.stream_id = next(_stream_ids)
        self.device = torch.device("cpu")
        self.priority = priority
        self.waited_on: list[Any] = []

    def __repr__(self) -> str:
        return f"<fake npu.Stream {self.stream_id}>"

    def wait_stream(self, other: Stream) -> None:
        self.waited_on.append(other)

    def wait_event(self, event: Event) -> None:
        self.waited_on.append(event)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def __enter__(self) -> Stream:
        _stream_stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stream_stack.pop()


_DEFAULT_STREAM = Stream()
_stream_stack: list[Stream] = []


def current_stream(device: Any = None) -> Stream:
    return _stream_stack[-1] if _stream_stack else _DEFAULT_STREAM


def default_stream(device: Any = None) -> Stream:
    return _DEFAULT_STREAM


def set_stream(s: Stream) -> None:
    if _stream_stack:
        _stream_stack[-1] = s
    else:
        _stream_stack.append(s)


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """``torch.npu.stream(s)``: make ``s`` current inside the block (None: no change)."""
    if s is None:
        yield None
        return
    _stream_stack.append(s)
    try:
        yield s
    finally:
        _stream_stack.pop()


class Event:
    """``torch.npu.Event``: records happen-before only; everything is complete at once."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, **kwargs: Any) -> None:
        self.enable_timing = enable_timing
        self.recorded_on: Stream | None = None
        self.record_count = 0

    def record(self, stream: Stream | None = None) -> None:
        self.recorded_on = stream or current_stream()
        self.record_count += 1

    def wait(self, stream: Stream | None = None) -> None:
        (stream or current_stream()).wait_event(self)

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Event) -> float:
        return 0.0


class ExternalEvent(Event):
    """``torch.npu.ExternalEvent``: used by graph params to order update vs replay."""

    def reset(self, stream: Stream | None = None) -> None:
        acl_graph.LOG.add("external_event_reset", stream=getattr(stream, "stream_id", None))

    def record(self, stream: Stream | None = None) -> None:
        super().record(stream)
        acl_graph.LOG.add("external_event_record", stream=self.recorded_on.stream_id)

    def wait(self, stream: Stream | None = None) -> None:
        super().wait(stream)
        acl_graph.LOG.add("external_event_wait",
                          stream=getattr(stream or current_stream(), "stream_id", None))


# ------------------------------------------------------------------------------------------
# device / memory queries: one fake device, fixed numbers
# ------------------------------------------------------------------------------------------
_current_device = 0


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current_device


def set_device(device: Any) -> None:
    global _current_device
    if isinstance(device, torch.device):
        device = device.index or 0
    elif isinstance(device, str):
        device = int(device.split(":")[1]) if ":" in device else 0
    _current_device = int(device)


@contextlib.contextmanager
def device(dev: Any) -> Iterator[None]:
    prev = _current_device
    set_device(dev if dev is not None else prev)
    try:
        yield
    finally:
        set_device(prev)


def synchronize(device: Any = None) -> None:
    pass


def _lazy_init() -> None:
    pass


def empty_cache() -> None:
    pass


def init() -> None:
    pass


def is_initialized() -> bool:
    return True


def get_device_name(device: Any = None) -> str:
    return "Ascend910B1"


def get_soc_version() -> int:
    return 223  # Ascend910B1 in torch_npu's SoC table


def get_device_properties(device: Any = None) -> Any:
    return types.SimpleNamespace(name="Ascend910B1", total_memory=FAKE_TOTAL_MEMORY,
                                 cube_core_num=24, vector_core_num=48, major=9, minor=1,
                                 uuid="00000000-0000-0000-0000-00000000fa4e")


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (9, 1)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return (FAKE_TOTAL_MEMORY, FAKE_TOTAL_MEMORY)


def memory_allocated(device: Any = None) -> int:
    return 0


memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated


def memory_stats(device: Any = None) -> dict[str, int]:
    return {"allocated_bytes.all.current": 0, "allocated_bytes.all.peak": 0,
            "reserved_bytes.all.current": 0, "reserved_bytes.all.peak": 0}


def reset_peak_memory_stats(device: Any = None) -> None:
    pass


def set_compile_mode(jit_compile: bool = False) -> None:
    pass


def manual_seed(seed: int) -> None:
    pass  # torch.manual_seed seeds the CPU generator (the one the fake NPU uses) and then us


manual_seed_all = manual_seed


def _is_in_bad_fork() -> bool:  # torch.manual_seed asks the PrivateUse1 module this
    return False


# ------------------------------------------------------------------------------------------
# pure-math ops with a CPU equivalent
# ------------------------------------------------------------------------------------------
class Format(enum.IntEnum):
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33


ACL_FORMAT_ND = 2
ACL_FORMAT_FRACTAL_NZ = 29


def npu_format_cast(tensor: torch.Tensor, acl_format: int, *args: Any, **kwargs: Any
                    ) -> torch.Tensor:
    return tensor  # CPU tensors have a single (ND) layout


npu_format_cast_ = npu_format_cast


def get_npu_format(tensor: torch.Tensor) -> int:
    return ACL_FORMAT_ND


def empty_with_format(size: Any, dtype: torch.dtype | None = None, device: Any = None,
                      acl_format: int = ACL_FORMAT_ND, **kwargs: Any) -> torch.Tensor:
    return torch.empty(size, dtype=dtype, device="cpu")


def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                     epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = x1 + x2
    y, rstd = npu_rms_norm(x, gamma, epsilon)
    return y, rstd, x


def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    a, b = x.chunk(2, dim=dim)
    return F.silu(a) * b


def npu_fast_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def npu_prefetch(*args: Any, **kwargs: Any) -> None:
    return None  # a cache hint only


class _OutOp:
    """An op with an ``.out`` overload (``op.out(..., out=[...])`` writes in place)."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self.out = lambda *args, **kwargs: fn(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("out", None)
        return self._fn(*args, **kwargs)


npu_fused_infer_attention_score = _OutOp(cpu_ops.fused_infer_attention_score)
_npu_fused_infer_attention_score_get_max_workspace = cpu_ops.fused_infer_attention_score_workspace
_npu_reshape_and_cache = cpu_ops.reshape_and_cache


def _weak_ref_tensor(t: torch.Tensor) -> torch.Tensor:
    return t


# dtypes: torch itself has two of torch_npu's; hifloat8 has no CPU dtype.
float4_e2m1fn_x2 = getattr(torch, "float4_e2m1fn_x2", MissingOp("torch_npu.float4_e2m1fn_x2"))
float8_e8m0fnu = getattr(torch, "float8_e8m0fnu", MissingOp("torch_npu.float8_e8m0fnu"))
hifloat8 = MissingOp("torch_npu.hifloat8")


# ------------------------------------------------------------------------------------------
# names that exist on a real NPU stack and have no CPU meaning
# ------------------------------------------------------------------------------------------
_TORCH_NPU_MISSING = (
    "atb", "multiprocessing", "distributed", "_inductor", "dynamo", "contrib",
)
_NPU_MISSING = (
    "NPUPluggableAllocator", "MemPool", "use_mem_pool", "memory_snapshot", "get_rng_state",
    "set_rng_state", "caching_allocator_alloc", "caching_allocator_delete", "host_empty_cache",
    "utilization", "set_per_process_memory_fraction", "aclnn",
    "get_npu_overflow_flag", "clear_npu_overflow_flag", "lightning_indexer",
)


def _build() -> dict[str, types.ModuleType]:
    me = sys.modules[__name__]
    tnpu = StubModule("torch_npu", _TORCH_NPU_MISSING, pattern=r"_?npu_\w+")
    for name in ("__version__", "Format", "npu_format_cast", "npu_format_cast_",
                 "get_npu_format", "empty_with_format", "npu_rms_norm", "npu_add_rms_norm",
                 "npu_swiglu", "npu_fast_gelu", "npu_prefetch", "float4_e2m1fn_x2",
                 "float8_e8m0fnu", "hifloat8", "MissingOp", "npu_fused_infer_attention_score",
                 "_npu_fused_infer_attention_score_get_max_workspace",
                 "_npu_reshape_and_cache"):
        setattr(tnpu, name, getattr(me, name))

    npu = StubModule("torch_npu.npu", _NPU_MISSING)
    for name in ("Stream", "Event", "ExternalEvent", "current_stream", "default_stream",
                 "set_stream", "stream", "is_available", "device_count", "current_device",
                 "set_device", "device", "synchronize", "empty_cache", "init", "is_initialized",
                 "get_device_name", "get_soc_version", "get_device_properties",
                 "get_device_capability", "mem_get_info", "memory_allocated", "memory_reserved",
                 "max_memory_allocated", "max_memory_reserved", "memory_stats",
                 "reset_peak_memory_stats", "set_compile_mode", "manual_seed",
                 "manual_seed_all", "_is_in_bad_fork", "_lazy_init"):
        setattr(npu, name, getattr(me, name))
    npu.NPUGraph = acl_graph.FakeNPUGraph
    npu.graph = acl_graph.graph
    npu.graph_pool_handle = acl_graph.graph_pool_handle
    npu.is_current_stream_capturing = acl_graph.is_current_stream_capturing
    npu.graph_task_group_begin = acl_graph.graph_task_group_begin
    npu.graph_task_group_end = acl_graph.graph_task_group_end
    npu.graph_task_update_begin = acl_graph.graph_task_update_begin
    npu.graph_task_update_end = acl_graph.graph_task_update_end
    npu.config = types.SimpleNamespace(allow_internal_format=False)
    memory = StubModule("torch_npu.npu.memory", _NPU_MISSING)
    for name in ("mem_get_info", "memory_allocated", "memory_reserved", "memory_stats",
                 "empty_cache"):
        setattr(memory, name, getattr(me, name))
    npu.memory = memory
    tnpu.npu = npu

    c = StubModule("torch_npu._C", ("_npu_getDevice", "_npu_setDevice"))
    c._NPUTaskGroupHandle = acl_graph.TaskGroupHandle
    c._weak_ref_tensor = _weak_ref_tensor
    dist = StubModule("torch_npu._C._distributed_c10d")

    class ProcessGroupHCCL:
        class Options:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.hccl_config: dict[str, Any] = {}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise NotImplementedError("fake NPU: ProcessGroupHCCL has no CPU equivalent")

    dist.ProcessGroupHCCL = ProcessGroupHCCL
    c._distributed_c10d = dist
    tnpu._C = c

    profiler = StubModule("torch_npu.profiler", (
        "profile", "tensorboard_trace_handler", "_ExperimentalConfig", "ProfilerActivity",
        "ProfilerLevel", "ExportType", "AiCMetrics", "schedule", "supported_activities"))
    profiler.dynamic_profile = StubModule("torch_npu.profiler.dynamic_profile",
                                          ("init", "step", "start"))
    tnpu.profiler = profiler

    op_plugin = StubModule("torch_npu.op_plugin")
    atb_pkg = StubModule("torch_npu.op_plugin.atb")
    atb_ops = StubModule("torch_npu.op_plugin.atb._atb_ops")
    # Registers ATB kernels as torch ops; there are none on CPU, so registering nothing is
    # the faithful CPU behaviour (calling an ATB op then fails as a missing op).
    atb_ops._register_atb_extensions = lambda *a, **k: None
    atb_pkg._atb_ops = atb_ops
    op_plugin.atb = atb_pkg
    tnpu.op_plugin = op_plugin

    mp = StubModule("torch_npu.multiprocessing")
    mp.reductions = StubModule("torch_npu.multiprocessing.reductions", ("rebuild_npu_tensor",))
    tnpu.multiprocessing = mp
    extra = {m.__name__: m for m in (
        StubModule("torch_npu.contrib"), StubModule("torch_npu.dynamo"),
        StubModule("torch_npu._inductor"), StubModule("torch_npu.utils"),
        StubModule("acl", ("init", "finalize", "get_soc_name")),
        StubModule("acl.rt", ("memcpy", "malloc", "free", "synchronize_stream",
                              "get_device", "set_device")),
    )}
    extra["acl"].rt = extra["acl.rt"]
    mods = {m.__name__: m for m in (tnpu, npu, memory, c, dist, profiler,
                                    profiler.dynamic_profile, op_plugin, atb_pkg, atb_ops, mp,
                                    mp.reductions)}
    mods.update(extra)
    return mods


def _is_npu(dev: Any) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "npu"
    return isinstance(dev, str) and (dev == "npu" or dev.startswith("npu:"))


_CPU = torch.device("cpu")


class CpuBackedNpu(torch.overrides.TorchFunctionMode):
    """The fake NPU's memory is CPU memory.

    * ``device="npu[:i]"`` (keyword or positional, e.g. ``t.to("npu")``) becomes ``cpu``:
      with no C++ PrivateUse1 allocator a real ``npu`` tensor cannot exist;
    * ``pin_memory=True`` becomes plain host memory: page-locked buffers are an NPU-side
      service (torch_npu registers the PrivateUse1 pinned allocator) and host and device memory
      are the same CPU memory here.

    A torch-function mode is thread-local: :func:`install` enters it on the installing thread;
    call :func:`enter_cpu_backed_npu` on other threads that allocate "npu" tensors.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        if kwargs.get("pin_memory"):
            kwargs = {**kwargs, "pin_memory": False}
        dev = kwargs.get("device")
        if dev is not None and _is_npu(dev):
            kwargs = {**kwargs, "device": _CPU}
        if any(_is_npu(a) for a in args):
            args = tuple(_CPU if _is_npu(a) else a for a in args)
        return func(*args, **kwargs)


def enter_cpu_backed_npu() -> CpuBackedNpu:
    mode = CpuBackedNpu()
    mode.__enter__()
    return mode


def _patch_torch_accelerator(npu: types.ModuleType) -> None:
    """``torch.accelerator`` talks to C++ PrivateUse1 hooks that only the real torch_npu
    registers; route its device/stream/sync calls to the fake (vllm-ascend itself patches
    the memory-stat ones the same way in ``patch_torch_accelerator``)."""
    acc = torch.accelerator
    acc.synchronize = lambda device=None: None
    acc.current_device_index = acc.current_device_idx = lambda: npu.current_device()
    acc.set_device_index = acc.set_device_idx = lambda device: npu.set_device(device)
    acc.device_count = npu.device_count
    acc.is_available = npu.is_available
    acc.current_stream = lambda device=None: npu.current_stream()
    acc.set_stream = npu.set_stream
    acc.empty_cache = npu.empty_cache
    acc.get_memory_info = lambda device=None: npu.mem_get_info()


def _mirror_privateuse1_kernels() -> None:
    """Kernels registered for ``PrivateUse1`` (the NPU key: vLLM registers its custom ops
    with ``current_platform.dispatch_key``) are also registered for ``CPU``, since the fake
    NPU's tensors are CPU tensors. Applies to registrations made after :func:`install`."""
    lib_cls = torch.library.Library
    if getattr(lib_cls.impl, "__fake_npu__", False):
        return
    original = lib_cls.impl

    def impl(self: Any, op_name: Any, fn: Any, dispatch_key: str = "", *args: Any,
             **kwargs: Any) -> Any:
        out = original(self, op_name, fn, dispatch_key, *args, **kwargs)
        if dispatch_key == "PrivateUse1":
            with contextlib.suppress(RuntimeError):  # a CPU kernel already exists: keep it
                original(self, op_name, fn, "CPU", *args, **kwargs)
        return out

    impl.__fake_npu__ = True  # type: ignore[attr-defined]
    lib_cls.impl = impl  # type: ignore[method-assign]


_MODULES: dict[str, types.ModuleType] | None = None
_MODE: CpuBackedNpu | None = None


def install() -> types.ModuleType:
    """Put the fake modules in ``sys.modules`` and register ``torch.npu``. Idempotent."""
    global _MODULES
    if _MODULES is None:
        _MODULES = _build()
    sys.modules.update(_MODULES)
    npu = _MODULES["torch_npu.npu"]
    if getattr(torch, "npu", None) is not npu:
        if torch._C._get_privateuse1_backend_name() != "npu":
            torch.utils.rename_privateuse1_backend("npu")
        if hasattr(torch, "npu"):
            delattr(torch, "npu")
        torch._register_device_module("npu", npu)
        sys.modules["torch.npu"] = npu
        _patch_torch_accelerator(npu)
        _mirror_privateuse1_kernels()
    import torch.distributed as dist

    if not hasattr(dist, "is_hccl_available"):  # torch_npu adds it; no HCCL on CPU
        dist.is_hccl_available = lambda: False  # type: ignore[attr-defined]
    global _MODE
    if _MODE is None:
        _MODE = enter_cpu_backed_npu()  # stays on this thread's mode stack for the process
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.Tensor.npu = lambda self, *args, **kwargs: self  # type: ignore[attr-defined]
    torch.Tensor.is_npu = property(lambda self: False)  # type: ignore[attr-defined]
    return _MODULES["torch_npu"]
