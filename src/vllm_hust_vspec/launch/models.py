"""Resolving model names to local folders. Never downloads: every source is local.

Order for a name that is not an existing path: ``HUST_VSPEC_MODEL_REGISTRY`` (a JSON file
mapping repo id or basename to a path), ``HUST_VSPEC_MODEL_DIR/<basename>``, then the local
Hugging Face cache (offline lookup only).

A Hugging Face name may pin a revision as ``org/name@revision`` (a branch, a tag or a commit
hash, as ``huggingface-cli download --revision`` took it); the default is ``main``. The
revision only selects the cache snapshot: the registry is asked for ``org/name@revision``
first, then ``org/name`` and the basename, and ``HUST_VSPEC_MODEL_DIR/<basename>`` is a plain
folder with no revisions. Hub repo ids cannot contain ``@``, so the spelling is unambiguous.

The cache lookup goes through ``huggingface_hub.snapshot_download(local_files_only=True)``,
so refs, commit hashes and the library's notion of an incomplete snapshot are its own; the
cache folder is computed here from the ``env`` passed in (``HF_HUB_CACHE``, then
``HUGGINGFACE_HUB_CACHE``, ``HF_HOME/hub``, ``XDG_CACHE_HOME/huggingface/hub``,
``~/.cache/huggingface/hub``: the library's precedence) because the library reads its own
constants from ``os.environ`` once, at import. Without ``huggingface_hub`` a small reader of
the same cache layout stands in.

:func:`with_checkout_model_dir` is the default the commands started without ``./run.sh``
(the bench, the profiler) apply: ``run.sh`` exports ``HUST_VSPEC_MODEL_DIR=<checkout>/.cache/
models`` when the variable is unset and that folder exists (``scripts/build_tiny_models.py``
fills it); the ``cpu-tiny`` preset's ``vspec-tiny/target`` and ``vspec-tiny/draft`` then
resolve to its ``target`` and ``draft`` folders.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

REGISTRY_ENV = "HUST_VSPEC_MODEL_REGISTRY"
MODEL_DIR_ENV = "HUST_VSPEC_MODEL_DIR"
DEFAULT_REVISION = "main"

# src/vllm_hust_vspec/launch/models.py -> the checkout; in an installed wheel this is some
# lib/ folder without run.sh, so nothing is found there.
CHECKOUT_ROOT = Path(__file__).resolve().parents[3]


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
    repo_id, revision = split_revision(spec)
    basename = repo_id.rstrip("/").split("/")[-1]

    registry = env.get(REGISTRY_ENV)
    if registry:
        found = _from_registry(registry, (spec, repo_id, basename))
        looked.append(f"{REGISTRY_ENV}={registry}")
        if found:
            return found
    model_dir = env.get(MODEL_DIR_ENV)
    if model_dir:
        candidate = Path(model_dir) / basename
        looked.append(str(candidate))
        if candidate.is_dir():
            return _model_folder(candidate, role, flag)
    if "/" in repo_id:
        cached = hf_cache_lookup(repo_id, env, revision=revision)
        at = f", revision {revision}" if revision else ""
        looked.append(f"Hugging Face cache ({hf_cache_dir(env)}{at})")
        if cached:
            return _model_folder(Path(cached), role, flag)
    raise ModelNotFoundError(
        f"{role} model {spec!r} was not found locally (vSpec never downloads models).\n"
        f"  looked in: {'; '.join(looked) or 'nowhere: no local source is configured'}\n"
        f"  fix: pass {flag} /path/to/{basename}, or put the folder at"
        f" ${MODEL_DIR_ENV}/{basename}, or map {spec!r} to a path in the JSON file named by"
        f" ${REGISTRY_ENV}, or download it beforehand into the Hugging Face cache"
        f" (huggingface-cli download {repo_id}{f' --revision {revision}' if revision else ''})"
    )


def split_revision(spec: str) -> tuple[str, str | None]:
    """``org/name@revision`` -> (``org/name``, ``revision``); no ``@``: (spec, None)."""
    repo_id, sep, revision = spec.partition("@")
    return (repo_id, revision) if sep and revision else (repo_id, None)


def _model_folder(folder: Path, role: str, flag: str) -> str:
    """``folder`` resolved, once it looks like a Hugging Face model (it has ``config.json``):
    vLLM would otherwise fail on it only after the other model has loaded."""
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(
            f"{role} model folder {str(folder)!r} has no config.json, so it is not a model"
            f" folder (a save_pretrained / Hugging Face snapshot folder holds one); fix {flag}"
        )
    return str(folder.resolve())


def _from_registry(registry: str, keys: tuple[str, ...]) -> str | None:
    try:
        mapping = json.loads(Path(registry).read_text())
    except FileNotFoundError:
        raise ModelNotFoundError(f"{REGISTRY_ENV} names a missing file: {registry}") from None
    except json.JSONDecodeError as exc:
        raise ModelNotFoundError(f"{REGISTRY_ENV} file {registry} is not JSON: {exc}") from None
    if not isinstance(mapping, dict):
        raise ModelNotFoundError(f"{REGISTRY_ENV} file {registry} must hold a JSON object")
    for key in dict.fromkeys(keys):  # in order, once each
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
    """The Hugging Face hub cache folder ``env`` selects, with the library's precedence.

    ``HF_HUB_CACHE``, then the legacy ``HUGGINGFACE_HUB_CACHE``, then ``$HF_HOME/hub``, then
    ``$XDG_CACHE_HOME/huggingface/hub``, then ``~/.cache/huggingface/hub``; ``~`` and ``$VAR``
    are expanded as the library does. Empty values count as unset.
    """
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return Path(_expand(env[key], env))
    if env.get("HF_HOME"):
        home = _expand(env["HF_HOME"], env)
    else:
        xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = _expand(os.path.join(xdg, "huggingface"), env)
    return Path(home) / "hub"


_VAR = re.compile(r"\$(\w+|\{[^}]*\})")


def _expand(value: str, env: Mapping[str, str]) -> str:
    """``os.path.expandvars(os.path.expanduser(value))`` reading variables from ``env``
    (unknown variables stay as written, as expandvars leaves them)."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1).strip("{}")
        return env.get(name, m.group(0))

    return _VAR.sub(sub, os.path.expanduser(value))


def hf_cache_lookup(
    repo_id: str, env: Mapping[str, str], revision: str | None = None
) -> str | None:
    """The snapshot folder of ``repo_id`` at ``revision`` in the local hub cache, or None.

    Offline only: ``huggingface_hub.snapshot_download(local_files_only=True)`` on the cache
    folder of :func:`hf_cache_dir` (it never opens a connection with that flag), or the
    stand-in reader when the library is not installed. ``revision`` is a branch, tag or commit
    hash; None means ``main``, and then, as before, a cache without a ``main`` ref (a download
    pinned to a commit) still yields its newest snapshot. A snapshot the library knows to be
    incomplete raises :class:`ModelNotFoundError`: vLLM would fail on it after loading.
    """
    cache = hf_cache_dir(env)
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        found = _hand_cache_lookup(cache, repo_id, revision)
    else:
        try:
            found = snapshot_download(
                repo_id,
                revision=revision or DEFAULT_REVISION,
                cache_dir=cache,
                local_files_only=True,
            )
        except (OSError, ValueError) as exc:
            # LocalEntryNotFoundError (a FileNotFoundError) means "not cached"; a bad repo id
            # is a ValueError (HFValidationError). Both mean: not in this cache.
            if type(exc).__name__ == "IncompleteSnapshotError":
                raise ModelNotFoundError(f"Hugging Face cache: {exc}") from None
            found = None
        if found is None and revision is None:
            found = _newest_snapshot(cache, repo_id)
    return str(Path(found).resolve()) if found else None


def _repo_folder(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _newest_snapshot(cache: Path, repo_id: str) -> str | None:
    snapshots = _repo_folder(cache, repo_id) / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates = sorted(
        (p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    return str(candidates[-1]) if candidates else None


def _hand_cache_lookup(cache: Path, repo_id: str, revision: str | None) -> str | None:
    """The cache layout read directly (``models--org--name/refs/<rev>`` ->
    ``snapshots/<commit>``, or ``snapshots/<revision>`` for a commit hash): the stand-in
    for hosts without ``huggingface_hub``."""
    repo_dir = _repo_folder(cache, repo_id)
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    rev = revision or DEFAULT_REVISION
    ref = repo_dir / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev
    if commit and (snapshots / commit).is_dir():
        return str(snapshots / commit)
    return _newest_snapshot(cache, repo_id) if revision is None else None


def checkout_model_dir(root: Path | None = None) -> Path | None:
    """``<checkout>/.cache/models`` when ``root`` (default: this package's checkout) is a
    source checkout (it holds run.sh) with that folder, else None."""
    base = CHECKOUT_ROOT if root is None else root
    models = base / ".cache" / "models"
    if (base / "run.sh").is_file() and models.is_dir():
        return models.resolve()
    return None


def with_checkout_model_dir(env: Mapping[str, str]) -> tuple[dict[str, str], Path | None]:
    """``env`` (copied) with ``HUST_VSPEC_MODEL_DIR`` set to the checkout's tiny models when
    it is unset or empty, as run.sh does; also the folder it was set to (None: unchanged)."""
    out = dict(env)
    if out.get(MODEL_DIR_ENV):
        return out, None
    models = checkout_model_dir()
    if models is not None:
        out[MODEL_DIR_ENV] = str(models)
    return out, models


__all__ = [
    "CHECKOUT_ROOT",
    "DEFAULT_REVISION",
    "MODEL_DIR_ENV",
    "REGISTRY_ENV",
    "ModelNotFoundError",
    "checkout_model_dir",
    "hf_cache_dir",
    "hf_cache_lookup",
    "resolve_model",
    "split_revision",
    "with_checkout_model_dir",
]
