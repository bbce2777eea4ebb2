"""Resolving model names to local folders. Never downloads: every source is local.

Order for a name that is not an existing path: the model registry (see
:mod:`~vllm_hust_vspec.launch.model_store`: ``--model-registry``, ``HUST_VSPEC_MODEL_REGISTRY``
or the XDG config file, mapping a repo id or basename to a path), ``HUST_VSPEC_MODEL_DIR/
<basename>``, then the local Hugging Face cache (offline lookup only); for the repo id of a
default drafter, last, the drafter's own places (:func:`model_store.find_drafter`).
:func:`default_drafter` finds the default drafter of a bare ``--method draft|eagle``.

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

import os
import re
from collections.abc import Mapping
from pathlib import Path

from vllm_hust_vspec.launch import model_store
from vllm_hust_vspec.launch.model_store import (
    DEFAULT_DRAFTERS,
    MODEL_DIR_ENV,
    REGISTRY_ENV,
    ModelNotFoundError,
    Registry,
    check_model,
    drafter_for_repo,
    find_drafter,
    load_registry,
)

DEFAULT_REVISION = "main"

# src/vllm_hust_vspec/launch/models.py -> the checkout; in an installed wheel this is some
# lib/ folder without run.sh, so nothing is found there.
CHECKOUT_ROOT = Path(__file__).resolve().parents[3]


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or os.sep * 2 in spec


def resolve_model(
    spec: str, role: str, env: Mapping[str, str], flag: str, registry: str | None = None
) -> str:
    """Return an absolute local folder for ``spec`` or raise :class:`ModelNotFoundError`.

    ``role`` ("target", "draft") and ``flag`` (the CLI flag that sets it) go into the error;
    ``registry`` is an explicit registry file (``--model-registry``), read before the
    environment's.
    """
    expanded = Path(os.path.expanduser(spec))
    if expanded.is_dir():
        return _model_folder(expanded, role, flag)
    if _looks_like_path(spec):
        # A recorded path (a preset's /data/shared-models/...) mounted elsewhere here: the same
        # folder name under HUST_VSPEC_MODEL_DIR or in the registry stands in for it.
        moved = _relocated(expanded.name, env, registry)
        if moved is not None:
            return _model_folder(moved, role, flag)
        raise ModelNotFoundError(
            f"{role} model path {spec!r} does not exist or is not a folder; set {flag}, or"
            f" put a folder named {expanded.name!r} under ${MODEL_DIR_ENV} or in the model"
            " registry"
        )
    looked: list[str] = []
    repo_id, revision = split_revision(spec)
    basename = repo_id.rstrip("/").split("/")[-1]

    reg = load_registry(env, registry)
    looked.append(f"registry {reg.path}" + ("" if reg.exists else " (no such file)"))
    found = _from_registry(reg, (spec, repo_id, basename))
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
    drafter = drafter_for_repo(repo_id)
    if drafter is not None:  # the default drafters' own places, as a bare --method finds them
        lookup = find_drafter(drafter, env, reg, with_override=False)
        if lookup.found is not None:
            return str(lookup.found)
        looked += [line for line in lookup.looked if not line.startswith("registry ")]
    raise ModelNotFoundError(
        f"{role} model {spec!r} was not found locally (vSpec never downloads models).\n"
        f"  looked in: {'; '.join(looked)}\n"
        f"  fix: pass {flag} /path/to/{basename}, or put the folder at"
        f" ${MODEL_DIR_ENV}/{basename}, or map {spec!r} to a path in the model registry"
        f" ({reg.path}; ${REGISTRY_ENV} or --model-registry name another), or download it"
        f" beforehand into the Hugging Face cache"
        f" (huggingface-cli download {repo_id}{f' --revision {revision}' if revision else ''})"
        + (f", or run 'vllm-hust-vspec-models --download --method {drafter.key}'"
           if drafter is not None else "")
    )


def default_drafter(
    method: str, env: Mapping[str, str], registry: str | None = None
) -> str:
    """The local folder of the default drafter of ``method`` ("draft", "eagle"), for a launch
    that names no draft model; raise :class:`ModelNotFoundError` listing every place looked.

    Places (first valid copy wins): :func:`model_store.find_drafter`'s, then the Hugging Face
    cache. Offline only.
    """
    spec = DEFAULT_DRAFTERS.get(method)
    if spec is None:
        raise ModelNotFoundError(
            f"method {method!r} needs a draft model: pass --draft-model PATH or set"
            " HUST_VSPEC_DRAFT_MODEL / HUST_VSPEC_EAGLE_MODEL"
        )
    lookup = find_drafter(spec, env, load_registry(env, registry))
    if lookup.found is not None:
        return str(lookup.found)
    cached = hf_cache_lookup(spec.repo_id, env)
    if cached:
        reason = check_model(Path(cached), spec)
        if reason is None:
            return cached
        lookup.looked.append(f"Hugging Face cache: {reason}")
    else:
        lookup.looked.append(f"Hugging Face cache ({hf_cache_dir(env)}): not cached")
    places = "".join(f"\n    {line}" for line in lookup.looked)
    raise ModelNotFoundError(
        f"method {method!r} needs a draft model and none was given; no usable local copy of"
        f" its default drafter {spec.repo_id} was found (vSpec never downloads models at"
        f" launch). Looked in:{places}\n"
        f"  fix: pass --draft-model /path/to/{spec.folder} (or set {spec.env}), or fetch it"
        f" once with 'vllm-hust-vspec-models --download --method {spec.key}' (revision"
        f" {spec.revision}), or put it at ${MODEL_DIR_ENV}/{spec.folder} or"
        f" {model_store.CONTAINER_MODEL_DIR / spec.folder}"
    )


def _relocated(name: str, env: Mapping[str, str], registry: str | None) -> Path | None:
    """``name`` under ``$HUST_VSPEC_MODEL_DIR``, else the registry's folder of that name."""
    model_dir = env.get(MODEL_DIR_ENV)
    if model_dir and (Path(model_dir) / name).is_dir():
        return Path(model_dir) / name
    found = _from_registry(load_registry(env, registry), (name,))
    return Path(found) if found else None


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


def _from_registry(reg: Registry, keys: tuple[str, ...]) -> str | None:
    """The folder the registry maps the first of ``keys`` to; a mapping to anything but a
    model folder is an error (the mapping was written on purpose)."""
    for key in dict.fromkeys(keys):  # in order, once each
        path = reg.entry_path(key)
        if path is not None:
            if not path.is_dir():
                raise ModelNotFoundError(
                    f"model registry {reg.path} maps {key!r} to {str(path)!r}, which is not a"
                    " folder"
                )
            return _model_folder(path, "mapped", f"the model registry ({reg.path})")
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
    "default_drafter",
    "hf_cache_dir",
    "hf_cache_lookup",
    "resolve_model",
    "split_revision",
    "with_checkout_model_dir",
]
