"""The default drafters and the model registry file. Filesystem only: nothing here downloads.

The registry is a JSON file in either of two layouts, both read everywhere:

* the structured one the predecessor wrote and ``vllm-hust-vspec-models`` writes::

    {"schema_version": 1,
     "models": {"draft": {"path": "/abs/Qwen2.5-0.5B-Instruct", "method": "draft_model",
                          "repo_id": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "<commit>"},
                "eagle": "/abs/Eagle-Qwen2.5-14B-Instruct"}}

  (an entry is a path, or an object whose ``path`` is one; other fields are informational);
* the flat one, ``{name: path}``.

Either way :func:`load_registry` yields one ``{name: entry}`` mapping. The file is the one
given explicitly (``--model-registry``), else ``$HUST_VSPEC_MODEL_REGISTRY``, else
``${XDG_CONFIG_HOME:-~/.config}/vllm-hust-vspec/models.json``; a missing file is an empty
registry.

A default drafter (``draft``: Qwen2.5-0.5B-Instruct, ``eagle``: Eagle-Qwen2.5-14B-Instruct) is
looked for, first valid copy wins, in: its override variable, the registry entry of its key,
``$HUST_VSPEC_MODEL_DIR/<folder>``, ``/data/shared-models/<folder>``, ``/model/<folder>`` and
``${XDG_DATA_HOME:-~/.local/share}/vllm-hust-vspec/models/<folder>``. A copy is valid when its
``config.json`` parses and names an accepted architecture, it holds a non-empty
``*.safetensors`` / ``*.bin`` file, and (the draft model) it has its tokenizer files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REGISTRY_ENV = "HUST_VSPEC_MODEL_REGISTRY"
MODEL_DIR_ENV = "HUST_VSPEC_MODEL_DIR"
REGISTRY_SCHEMA_VERSION = 1
APP_DIR = "vllm-hust-vspec"
# Module attributes, read at call time, so tests can point them elsewhere.
SHARED_MODEL_DIR = Path("/data/shared-models")
CONTAINER_MODEL_DIR = Path("/model")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


class ModelNotFoundError(FileNotFoundError):
    """A model could not be found locally; the message says where to put it."""


class ModelRegistryError(ModelNotFoundError):
    """The registry file exists but cannot be used (unreadable, not JSON, wrong schema)."""


@dataclass(frozen=True)
class DrafterSpec:
    """One default drafter: where it comes from, where it is looked for, what it must be."""

    key: str  # registry key and vSpec method name
    vllm_method: str  # the predecessor's registry ``method`` value
    repo_id: str
    revision: str  # the commit the predecessor pinned
    folder: str
    env: str  # override variable
    architectures: tuple[str, ...]
    needs_tokenizer: bool


DEFAULT_DRAFTERS: dict[str, DrafterSpec] = {
    "draft": DrafterSpec(
        "draft", "draft_model", "Qwen/Qwen2.5-0.5B-Instruct",
        "7ae557604adf67be50417f59c2c2f167def9a775", "Qwen2.5-0.5B-Instruct",
        "HUST_VSPEC_DRAFT_MODEL", ("Qwen2ForCausalLM",), True,
    ),
    "eagle": DrafterSpec(
        "eagle", "eagle", "Zjcxy-SmartAI/Eagle-Qwen2.5-14B-Instruct",
        "b8d3782e850e7692ea4e5c833e8477743998b706", "Eagle-Qwen2.5-14B-Instruct",
        "HUST_VSPEC_EAGLE_MODEL", ("Qwen2ForCausalLMEagle",), False,
    ),
}


def drafter_for_repo(repo_id: str) -> DrafterSpec | None:
    """The default drafter published as ``repo_id``, if it is one."""
    return next((d for d in DEFAULT_DRAFTERS.values() if d.repo_id == repo_id), None)


def _xdg(env: Mapping[str, str], var: str, fallback: str) -> Path:
    if env.get(var):
        return Path(os.path.expanduser(env[var]))
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / fallback


def user_model_dir(env: Mapping[str, str]) -> Path:
    """``${XDG_DATA_HOME:-~/.local/share}/vllm-hust-vspec/models``."""
    return _xdg(env, "XDG_DATA_HOME", ".local/share") / APP_DIR / "models"


def default_model_dir(env: Mapping[str, str]) -> Path:
    """Where ``vllm-hust-vspec-models`` puts downloads unless told: ``$HUST_VSPEC_MODEL_DIR``,
    else ``/data/shared-models`` when it is a writable folder, else :func:`user_model_dir`."""
    if env.get(MODEL_DIR_ENV):
        return Path(os.path.expanduser(env[MODEL_DIR_ENV]))
    if SHARED_MODEL_DIR.is_dir() and os.access(SHARED_MODEL_DIR, os.W_OK):
        return SHARED_MODEL_DIR
    return user_model_dir(env)


def registry_location(env: Mapping[str, str], explicit: str | os.PathLike[str] | None) -> Path:
    """The registry file: ``explicit``, else ``$HUST_VSPEC_MODEL_REGISTRY``, else the XDG
    config path (``${XDG_CONFIG_HOME:-~/.config}/vllm-hust-vspec/models.json``)."""
    if explicit:
        return Path(os.path.expanduser(os.fspath(explicit)))
    if env.get(REGISTRY_ENV):
        return Path(os.path.expanduser(env[REGISTRY_ENV]))
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / APP_DIR / "models.json"


@dataclass(frozen=True)
class Registry:
    """A registry file as read: its path, whether it exists, and its ``{name: entry}``."""

    path: Path
    exists: bool
    models: dict[str, Any] = field(default_factory=dict)

    def entry_path(self, name: str) -> Path | None:
        """The folder the entry ``name`` names (a path, or an object's ``path``), or None."""
        entry = self.models.get(name)
        if isinstance(entry, dict):
            entry = entry.get("path")
        return Path(os.path.expanduser(entry)) if isinstance(entry, str) else None


def load_registry(
    env: Mapping[str, str], explicit: str | os.PathLike[str] | None = None
) -> Registry:
    """Read the registry :func:`registry_location` picks, in either layout.

    A missing file is an empty registry; an unreadable one, bad JSON, a non-object root, a
    ``schema_version`` other than 1 or a ``models`` that is not an object raise
    :class:`ModelRegistryError` naming the file.
    """
    path = registry_location(env, explicit)
    if not path.exists():
        return Registry(path, exists=False)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelRegistryError(f"cannot read model registry {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelRegistryError(f"model registry {path} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ModelRegistryError(f"model registry {path} must hold a JSON object")
    if "schema_version" not in doc and not isinstance(doc.get("models"), dict):
        return Registry(path, True, doc)  # flat {name: path}
    if doc.get("schema_version") != REGISTRY_SCHEMA_VERSION:
        raise ModelRegistryError(
            f"model registry {path}: schema_version {doc.get('schema_version')!r} is not"
            f" supported (expected {REGISTRY_SCHEMA_VERSION})"
        )
    if not isinstance(doc.get("models"), dict):
        raise ModelRegistryError(f'model registry {path} has no "models" object')
    return Registry(path, True, dict(doc["models"]))


def registry_entry(spec: DrafterSpec, path: Path) -> dict[str, str]:
    """The structured entry ``vllm-hust-vspec-models`` writes for ``spec`` found at ``path``."""
    return {"path": str(path), "method": spec.vllm_method, "repo_id": spec.repo_id,
            "revision": spec.revision}


def write_registry(path: Path, models: Mapping[str, Any]) -> None:
    """Write ``models`` as a schema-1 registry (sorted keys, indent 2), atomically: readers see
    the old file or the new one. Parent folders are created."""
    from vllm_hust_vspec.adaptive._files import write_text_atomic

    doc = {"schema_version": REGISTRY_SCHEMA_VERSION, "models": dict(models)}
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", make_parents=True)


def check_model(path: Path, spec: DrafterSpec) -> str | None:
    """None when ``path`` is a usable copy of ``spec``; else what is wrong, naming the file."""
    if not path.is_dir():
        return f"{path} is not a folder" if path.exists() else f"{path} does not exist"
    config = path / "config.json"
    if not config.is_file():
        return f"{config} is missing"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{config} is not valid JSON ({exc})"
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(archs, list) or not set(spec.architectures) & set(map(str, archs)):
        return (f"{config}: architectures {archs!r} name none of"
                f" {', '.join(spec.architectures)}")
    weights = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    if not any(w.is_file() and w.stat().st_size > 0 for w in weights):
        return f"{path} holds no non-empty *.safetensors or *.bin weight file"
    if spec.needs_tokenizer:
        if not (path / "tokenizer_config.json").is_file():
            return f"{path / 'tokenizer_config.json'} is missing (tokenizer)"
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            return f"{path} has none of the tokenizer files {', '.join(TOKENIZER_FILES)}"
    return None


@dataclass
class Lookup:
    """The outcome of :func:`find_drafter`: the copy found (or None), its source, and every
    place looked with why it was passed over."""

    spec: DrafterSpec
    found: Path | None = None
    source: str = ""
    looked: list[str] = field(default_factory=list)


def candidates(
    spec: DrafterSpec, env: Mapping[str, str], registry: Registry,
    model_dir: Path | None = None, with_override: bool = True,
) -> list[tuple[str, Path | None]]:
    """(source label, folder) in lookup order. A source with nothing to try has folder None and
    a label that says why; a fixed folder has an empty label. ``model_dir`` (the models
    command's ``--model-dir``) goes before the fixed folders; a folder is listed once."""
    out: list[tuple[str, Path | None]] = []
    if with_override:
        value = env.get(spec.env)
        path = Path(os.path.expanduser(value)) if value else None
        out.append((f"${spec.env}" + ("" if value else " is unset"), path))
    entry = registry.entry_path(spec.key)
    why = "" if entry else (" has no usable entry" if registry.exists else " does not exist")
    out.append((f"registry {registry.path}" + (f" [{spec.key!r}]" if entry else why), entry))
    if model_dir is not None:
        out.append(("--model-dir", model_dir / spec.folder))
    if env.get(MODEL_DIR_ENV):
        out.append((f"${MODEL_DIR_ENV}",
                    Path(os.path.expanduser(env[MODEL_DIR_ENV])) / spec.folder))
    for base in (SHARED_MODEL_DIR, CONTAINER_MODEL_DIR, user_model_dir(env)):
        out.append(("", base / spec.folder))
    seen: set[Path] = set()
    unique = []
    for label, folder in out:
        if folder is not None:
            resolved = folder.resolve(strict=False)
            if resolved in seen:
                continue
            seen.add(resolved)
        unique.append((label, folder))
    return unique


def find_drafter(
    spec: DrafterSpec, env: Mapping[str, str], registry: Registry,
    model_dir: Path | None = None, with_override: bool = True,
) -> Lookup:
    """The first valid copy of ``spec`` among :func:`candidates` (resolved), else a
    :class:`Lookup` with ``found`` None and the reason for every candidate."""
    lookup = Lookup(spec)
    for label, folder in candidates(spec, env, registry, model_dir, with_override):
        if folder is None:
            lookup.looked.append(label)
            continue
        reason = check_model(folder, spec)
        if reason is None:
            lookup.found, lookup.source = folder.resolve(), label or str(folder.parent)
            return lookup
        lookup.looked.append(f"{label}: {reason}" if label else reason)
    return lookup


__all__ = [
    "CONTAINER_MODEL_DIR",
    "DEFAULT_DRAFTERS",
    "MODEL_DIR_ENV",
    "REGISTRY_ENV",
    "REGISTRY_SCHEMA_VERSION",
    "SHARED_MODEL_DIR",
    "DrafterSpec",
    "Lookup",
    "ModelNotFoundError",
    "ModelRegistryError",
    "Registry",
    "candidates",
    "check_model",
    "default_model_dir",
    "drafter_for_repo",
    "find_drafter",
    "load_registry",
    "registry_entry",
    "registry_location",
    "user_model_dir",
    "write_registry",
]
