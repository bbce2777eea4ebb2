"""Import saved vLLM-Ascend-HUST files on CPU against the installed vLLM (subprocess only).

The reference tree holds the fork's speculative-decoding files, not the whole package, so the
fork is imported module by module: the modules named in ``real`` load from their saved file
(byte-exact), every other ``vllm_ascend.*`` module is a stub whose attributes are MagicMocks
(the NPU attention, ops and config modules), and the NPU itself is ``tests/fake_npu``. vLLM
modules the fork imports that the installed vLLM lacks (symbols of the vLLM-HUST core or of a
newer vLLM) become stubs too, and are listed in :data:`STUBBED_VLLM` so a test can say what
was not real.

    from _fork_import import load_fork
    mods = load_fork(tree, real={"vllm_ascend.spec_decode.llm_base_proposer": path, ...})
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

STUBBED_VLLM: list[str] = []
STUBBED_ASCEND: list[str] = []


class AnyModule(types.ModuleType):
    """A stub module (and package): any attribute is a MagicMock, created once."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = AnyModule(spec.name)
        mod.__path__ = []  # type: ignore[attr-defined]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _ForkFinder(importlib.abc.MetaPathFinder):
    """``vllm_ascend.*``: the saved file when listed in ``real``, else a stub."""

    def __init__(self, real: Mapping[str, Path]) -> None:
        self.real = dict(real)

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "vllm_ascend" and not name.startswith("vllm_ascend."):
            return None
        if name in self.real:
            return importlib.util.spec_from_file_location(name, self.real[name])
        STUBBED_ASCEND.append(name)
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


class _MissingVllmFinder(importlib.abc.MetaPathFinder):
    """Last on the meta path: a ``vllm.*`` module the installed vLLM lacks becomes a stub."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        # vllm.third_party.*: vLLM probes optional kernels there and expects ImportError
        if not name.startswith("vllm.") or name.startswith("vllm.third_party"):
            return None
        STUBBED_VLLM.append(name)
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def load_fork(real: Mapping[str, Path], fake_npu_dir: Path) -> dict[str, types.ModuleType]:
    """Install the fake NPU and the finders, then import every module in ``real``."""
    sys.path.insert(0, str(fake_npu_dir))
    import fake_npu

    fake_npu.install()
    sys.meta_path.insert(0, _ForkFinder(real))
    sys.meta_path.append(_MissingVllmFinder())
    return {name: importlib.import_module(name) for name in real}


__all__ = ["STUBBED_ASCEND", "STUBBED_VLLM", "AnyModule", "load_fork"]
