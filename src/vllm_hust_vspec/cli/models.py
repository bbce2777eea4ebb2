"""``vllm-hust-vspec-models``: find, check and register the default drafters; download on request.

Offline unless ``--download`` is given. For each selected drafter (``draft``:
Qwen/Qwen2.5-0.5B-Instruct, ``eagle``: Zjcxy-SmartAI/Eagle-Qwen2.5-14B-Instruct) it looks in the
places the launcher looks (``launch.model_store``), plus ``--model-dir``; a missing one is
downloaded at its pinned revision into ``--model-dir/<folder>`` only with ``--download``. The
copies found are written to the model registry, which a bare ``vllm-hust-vspec --method
draft|eagle`` then reads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_hust_vspec.launch.model_store import (
    DEFAULT_DRAFTERS,
    DrafterSpec,
    ModelRegistryError,
    Registry,
    check_model,
    default_model_dir,
    find_drafter,
    load_registry,
    registry_entry,
    write_registry,
)

PROG = "vllm-hust-vspec-models"
_EPILOG = """\
defaults: --model-dir is $HUST_VSPEC_MODEL_DIR, else /data/shared-models when writable, else
${XDG_DATA_HOME:-~/.local/share}/vllm-hust-vspec/models; the registry is $HUST_VSPEC_MODEL_REGISTRY,
else ${XDG_CONFIG_HOME:-~/.config}/vllm-hust-vspec/models.json. $HUST_VSPEC_DRAFT_MODEL and
$HUST_VSPEC_EAGLE_MODEL are checked first.

exit status: 0 every selected drafter is registered (or missing with --allow-missing),
1 a drafter is missing or its download failed, or the registry cannot be written,
2 bad arguments or an unusable registry file.
"""


class DownloadError(RuntimeError):
    """A download was asked for and did not give a usable copy."""


def build_parser() -> argparse.ArgumentParser:
    """Argument parser (exposed for docs and tests)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Detect, check and register the default vSpec Draft and EAGLE models; "
                    "download missing ones only with --download.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model-dir", metavar="DIR",
                   help="folder searched first and downloaded into (see defaults below)")
    p.add_argument("--registry", "--model-registry", dest="registry", metavar="FILE",
                   help="registry file to read and write (see defaults below)")
    p.add_argument("--download", action=argparse.BooleanOptionalAction, default=False,
                   help="download missing models from Hugging Face at the pinned revision "
                        "(default: off, detect only)")
    p.add_argument("--allow-missing", action="store_true",
                   help="a missing model is reported but is not an error")
    p.add_argument("--method", choices=("draft", "eagle", "all"), default="all",
                   help="which default drafter to set up (default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON report on stdout")
    return p


def _say(text: str) -> None:
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def download(spec: DrafterSpec, dest: Path) -> Path:
    """Fetch ``spec`` at its pinned revision into ``dest`` with ``huggingface_hub`` and check
    it; raise :class:`DownloadError` naming the model and the manual alternative."""
    manual = (f"download {spec.repo_id} at revision {spec.revision} into {dest} by other means"
              f" (e.g. huggingface-cli download {spec.repo_id} --revision {spec.revision}"
              f" --local-dir {dest}) and run {PROG} again, or pass --draft-model PATH to the"
              " launcher")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise DownloadError(
            f"cannot download {spec.repo_id}: huggingface_hub is not installed (pip install"
            f" huggingface_hub); or {manual}"
        ) from None
    _say(f"{spec.key}: downloading {spec.repo_id}@{spec.revision} into {dest}")
    try:
        snapshot_download(spec.repo_id, revision=spec.revision, local_dir=str(dest))
    except Exception as exc:  # the hub's errors vary by version; all mean "not fetched"
        raise DownloadError(
            f"cannot download {spec.repo_id}@{spec.revision} (is the Hugging Face hub"
            f" reachable? HF_ENDPOINT / proxy settings apply): {type(exc).__name__}: {exc};"
            f" {manual}"
        ) from None
    reason = check_model(dest, spec)
    if reason is not None:
        raise DownloadError(f"downloaded {spec.repo_id} is not usable: {reason}")
    return dest.resolve()


def _set_up(
    spec: DrafterSpec, env: Mapping[str, str], registry: Registry, model_dir: Path,
    fetch: bool,
) -> dict[str, Any]:
    """One drafter: found, downloaded, missing or failed, as a JSON-ready report."""
    lookup = find_drafter(spec, env, registry, model_dir=model_dir)
    report: dict[str, Any] = {"repo_id": spec.repo_id, "revision": spec.revision,
                              "path": None, "looked": lookup.looked}
    if lookup.found is not None:
        _say(f"{spec.key}: found {lookup.found} ({lookup.source})")
        return {**report, "status": "found", "path": str(lookup.found)}
    if not fetch:
        _say(f"{spec.key}: no usable local copy of {spec.repo_id}; looked in:")
        for line in lookup.looked:
            _say(f"    {line}")
        _say(f"{spec.key}: run with --download to fetch it into {model_dir / spec.folder},"
             " or put a copy there yourself")
        return {**report, "status": "missing"}
    try:
        path = download(spec, model_dir / spec.folder)
    except DownloadError as exc:
        _say(f"{spec.key}: error: {exc}")
        return {**report, "status": "failed", "error": str(exc)}
    _say(f"{spec.key}: downloaded to {path}")
    return {**report, "status": "downloaded", "path": str(path)}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vllm-hust-vspec-models``."""
    ns = build_parser().parse_args(argv)
    env = dict(os.environ)
    model_dir = (Path(os.path.expanduser(ns.model_dir)) if ns.model_dir
                 else default_model_dir(env))
    try:
        registry = load_registry(env, ns.registry)
    except ModelRegistryError as exc:
        _say(f"error: {exc}")
        return 2
    keys = list(DEFAULT_DRAFTERS) if ns.method == "all" else [ns.method]
    reports = {key: _set_up(DEFAULT_DRAFTERS[key], env, registry, model_dir, ns.download)
               for key in keys}

    models = dict(registry.models)
    for key, report in reports.items():
        if report["path"]:
            models[key] = registry_entry(DEFAULT_DRAFTERS[key], Path(report["path"]))
        else:
            models.pop(key, None)  # a stale entry: it pointed at no usable copy
    written, status = False, 0
    if models != registry.models or (models and not registry.exists):
        try:
            write_registry(registry.path, models)
            written = True
            _say(f"wrote model registry {registry.path}")
        except OSError as exc:
            _say(f"error: cannot write model registry {registry.path}: {exc}")
            status = 1
    else:
        _say(f"model registry {registry.path} is up to date" if registry.exists
             else "no model found: no registry written")
    bad = [k for k, r in reports.items()
           if r["status"] == "failed" or (r["status"] == "missing" and not ns.allow_missing)]
    if bad:
        _say(f"error: not set up: {', '.join(bad)}"
             + ("" if ns.download else " (offline; --download fetches, --allow-missing skips)"))
        status = 1
    if ns.json:
        print(json.dumps({"registry": str(registry.path), "registry_written": written,
                          "model_dir": str(model_dir), "download": ns.download,
                          "models": reports}, indent=2, sort_keys=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
