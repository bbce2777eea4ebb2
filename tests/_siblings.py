"""The vLLM-HUST sibling plugins from the package index, for the composition tests.

``pip download --no-deps`` fetches each into ``.cache/siblings`` (git-ignored) once and the
archive is unpacked beside it; :func:`path` returns a directory to put on ``sys.path`` (its
``*.dist-info`` makes the sibling's entry points visible to ``importlib.metadata``).
Nothing is installed into the venv. A sibling the index lacks is a skip naming it.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "siblings"

# distribution -> (pinned version, extra pip download arguments)
SIBLINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "vllm-ascend-kvcompress-hust": ("0.10.0", ()),
    "vllm-ascend-split-batch": ("0.2.0", ()),
    "vllm-hust-dla": ("0.1.0", ()),
    "vllm-hust-opset": ("0.3.2", ()),
    # needs Python >= 3.12 and ships an sdist: read, never imported here
    "vllm-betterscale": ("0.5.1", ("--no-binary", ":all:", "--python-version", "3.12")),
    "vllm-hust-clm-lifecycle": ("0.1.1", ()),
    "vllm-ascend-quantized-kv-cache": ("0.2.0rc4", ()),
    "vllm-ascend-quant-ext": ("0.4.1a4", ()),
    "vllm-hust-bidkv": ("0.2.1", ()),
}


def _archive(dist: str, version: str, extra: tuple[str, ...]) -> Path:
    stem = dist.replace("-", "_")
    for found in CACHE.glob(f"{stem}-{version}*"):
        if found.is_file():
            return found
    CACHE.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        *extra, f"{dist}=={version}", "-d", str(CACHE)],
                       capture_output=True, text=True, timeout=600)
    for found in CACHE.glob(f"{stem}-{version}*"):
        if found.is_file():
            return found
    pytest.skip(f"sibling {dist}=={version} is not on the package index here: "
                f"{(r.stderr or r.stdout)[-300:]}")


def path(dist: str) -> Path:
    """A directory holding the sibling's packages and dist-info (unpacked once)."""
    version, extra = SIBLINGS[dist]
    out = CACHE / f"{dist}-{version}"
    if (out / ".done").exists():
        return out
    archive = _archive(dist, version, extra)
    out.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            z.extractall(out)
    else:
        with tarfile.open(archive) as t:
            t.extractall(out, filter="data")
    (out / ".done").touch()
    return out


def source_root(dist: str) -> Path:
    """Where the sibling's top-level packages are (an sdist's ``src/`` or the wheel root)."""
    base = path(dist)
    found = sorted(base.glob("*/src"))
    return found[0] if found else base


def on_path(dist: str) -> Path:
    """Put the sibling on ``sys.path`` (idempotent) and return its root."""
    root = source_root(dist)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
        import importlib

        importlib.invalidate_caches()
    return root
