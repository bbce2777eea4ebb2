"""Fetch the real vllm-ascend sdists into .cache/sdists (git-ignored) for the Ascend tests.

vllm-ascend ships sdists only, and ``pip download`` prepares their metadata by running the
package's setup.py: that needs ``setuptools_scm`` and ``SOC_VERSION`` (no ``npu-smi`` here),
and build isolation would try to install build requirements (triton-ascend pins) that are not
on the index. So: ``--no-build-isolation`` from a small cached venv that has setuptools and
setuptools_scm, with ``COMPILE_CUSTOM_KERNELS=0 SOC_VERSION=ascend910b1``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "sdists"
RELEASE = "0.23.0.post1"
ENV = {"COMPILE_CUSTOM_KERNELS": "0", "SOC_VERSION": "ascend910b1"}


class Unavailable(RuntimeError):
    """The sdist cannot be fetched here (no network / index)."""


def _pip() -> list[str]:
    try:
        import setuptools_scm  # noqa: F401

        return [sys.executable, "-m", "pip"]
    except ImportError:
        pass
    venv = ROOT / ".cache" / "sdist-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=300)
    probe = subprocess.run([str(py), "-c", "import setuptools_scm"], capture_output=True)
    if probe.returncode:
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "setuptools",
                            "setuptools_scm", "wheel"], capture_output=True, text=True,
                           timeout=600)
        if r.returncode:
            raise Unavailable(f"cannot install setuptools_scm for pip download: {r.stderr[-400:]}")
    return [str(py), "-m", "pip"]


def newest_prerelease() -> str:
    """Newest vllm-ascend version on the index (pre-releases included)."""
    cached = sorted(CACHE.glob("vllm_ascend-*rc*.tar.gz"))
    try:
        r = subprocess.run([*_pip(), "index", "versions", "vllm-ascend", "--pre"],
                           capture_output=True, text=True, timeout=120)
        m = re.search(r"vllm-ascend \(([^)]+)\)", r.stdout)
        if m:
            return m.group(1)
    except (OSError, subprocess.SubprocessError):
        pass
    if cached:
        return cached[-1].name[len("vllm_ascend-"):-len(".tar.gz")]
    raise Unavailable("cannot list vllm-ascend versions (index unreachable)")


def sdist(version: str) -> Path:
    """Path of ``vllm_ascend-<version>.tar.gz``, downloading it once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"vllm_ascend-{version}.tar.gz"
    if path.exists():
        return path
    r = subprocess.run(
        [*_pip(), "download", "--no-deps", "--no-build-isolation", "--no-binary", "vllm-ascend",
         f"vllm-ascend=={version}", "-d", str(CACHE)],
        capture_output=True, text=True, timeout=900, env={**os.environ, **ENV},
    )
    if r.returncode or not path.exists():
        raise Unavailable(f"pip download vllm-ascend=={version} failed: {r.stderr[-600:]}")
    return path


def extracted(version: str) -> Path:
    """Directory holding the sdist unpacked (its root has ``vllm_ascend/``)."""
    import tarfile

    target = CACHE / "unpacked" / version
    root = target / f"vllm_ascend-{version}"
    if not (root / "vllm_ascend" / "__init__.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist(version)) as tar:
            members = [m for m in tar.getmembers()
                       if "/vllm_ascend/" in m.name or m.name.endswith("PKG-INFO")]
            tar.extractall(target, members=members, filter="data")
    return root
