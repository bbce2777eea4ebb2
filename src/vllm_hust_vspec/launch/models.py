"""Resolving model names to local folders. Never downloads: every source is local.

Order for a name that is not an existing path: ``HUST_VSPEC_MODEL_REGISTRY`` (a JSON file
mapping repo id or basename to a path), ``HUST_VSPEC_MODEL_DIR/<basename>``, then the local
Hugging Face cache (offline lookup only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

REGISTRY_ENV = "HUST_VSPEC_MODEL_REGISTRY"
MODEL_DIR_ENV = "HUST_VSPEC_MODEL_DIR"


class ModelNotFoundError(FileNotFoundError):
    """A model could not be found locally; the message says where to put it."""


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or os.sep * 2 in spec


def resolve_model(spec: str, role: str, env: Mapping[str, str], flag: str) -> str:
    """Return an absolute local folder for ``spec`` or raise :class:`ModelNotFoundError`.

    ``role`` ("target", "draft") and ``flag`` (the CLI flag that sets it) go into the error.
    """
    expanded = Path(os.path.expanduser(spec))
    if expanded.is_dir():
        return _model_folder(expanded, role, flag)
    if _looks_like_path(spec):
        raise ModelNotFoundError(
            f"{role} model path {spec!r} does not exist or is not a folder (set {flag})"
        )
    looked: list[str] = []
    basename = spec.rstrip("/").split("/")[-1]

    registry = env.get(REGISTRY_ENV)
    if registry:
        found = _from_registry(registry, spec, basename)
        looked.append(f"{REGISTRY_ENV}={registry}")
        if found:
            return found
    model_dir = env.get(MODEL_DIR_ENV)
    if model_dir:
        candidate = Path(model_dir) / basename
        looked.append(str(candidate))
        if candidate.is_dir():
            return _model_folder(candidate, role, flag)
    if "/" in spec:
        cached = hf_cache_lookup(spec, env)
        looked.append(f"Hugging Face cache ({hf_cache_dir(env)})")
        if cached:
            return _model_folder(Path(cached), role, flag)
    raise ModelNotFoundError(
        f"{role} model {spec!r} was not found locally (vSpec never downloads models).\n"
        f"  looked in: {'; '.join(looked) or 'nowhere: no local source is configured'}\n"
        f"  fix: pass {flag} /path/to/{basename}, or put the folder at"
        f" ${MODEL_DIR_ENV}/{basename}, or map {spec!r} to a path in the JSON file named by"
        f" ${REGISTRY_ENV}, or download it beforehand into the Hugging Face cache"
        f" (huggingface-cli download {spec})"
    )


def _model_folder(folder: Path, role: str, flag: str) -> str:
    """``folder`` resolved, once it looks like a Hugging Face model (it has ``config.json``):
    vLLM would otherwise fail on it only after the other model has loaded."""
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(
            f"{role} model folder {str(folder)!r} has no config.json, so it is not a model"
            f" folder (a save_pretrained / Hugging Face snapshot folder holds one); fix {flag}"
        )
    return str(folder.resolve())


def _from_registry(registry: str, spec: str, basename: str) -> str | None:
    try:
        mapping = json.loads(Path(registry).read_text())
    except FileNotFoundError:
        raise ModelNotFoundError(f"{REGISTRY_ENV} names a missing file: {registry}") from None
    except json.JSONDecodeError as exc:
        raise ModelNotFoundError(f"{REGISTRY_ENV} file {registry} is not JSON: {exc}") from None
    if not isinstance(mapping, dict):
        raise ModelNotFoundError(f"{REGISTRY_ENV} file {registry} must hold a JSON object")
    for key in (spec, basename):
        path = mapping.get(key)
        if isinstance(path, str):
            p = Path(os.path.expanduser(path))
            if not p.is_dir():
                raise ModelNotFoundError(
                    f"{REGISTRY_ENV} file {registry} maps {key!r} to {path!r}, which is not a"
                    " folder"
                )
            return _model_folder(p, "mapped", f"{REGISTRY_ENV} ({registry})")
    return None


def hf_cache_dir(env: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache folder, following the library's own variables."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path(os.path.expanduser("~/.cache/huggingface/hub"))


def hf_cache_lookup(repo_id: str, env: Mapping[str, str]) -> str | None:
    """The snapshot folder of ``repo_id`` in the local hub cache, or None. Offline only.

    Reads the cache layout (``models--org--name/refs/main`` -> ``snapshots/<rev>``) directly,
    so it works without ``huggingface_hub`` and can never reach the network.
    """
    repo_dir = hf_cache_dir(env) / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        snap = snapshots / ref.read_text().strip()
        if snap.is_dir():
            return str(snap.resolve())
    candidates = sorted(
        (p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    return str(candidates[-1].resolve()) if candidates else None
