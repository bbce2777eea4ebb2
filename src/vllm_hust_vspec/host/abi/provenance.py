"""Versions and git state of the host packages, found without importing them."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

from vllm_hust_vspec.host.abi.model import HostInfo
from vllm_hust_vspec.host.abi.source import PackageSource


def _distribution(package: str) -> md.Distribution | None:
    try:
        names = md.packages_distributions().get(package, [])
    except Exception:  # noqa: BLE001 - broken metadata of unrelated packages
        names = []
    for name in names:
        try:
            return md.distribution(name)
        except md.PackageNotFoundError:
            continue
    return None


def _editable_dir(dist: md.Distribution) -> Path | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    url = data.get("url", "")
    if url.startswith("file://") and data.get("dir_info", {}).get("editable"):
        return Path(unquote(urlparse(url).path))
    return None


def git_state(path: Path, tracked: Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD revision, dirty) of the checkout holding ``path``; (None, None) when none.

    ``tracked``: a file that must be tracked by that checkout (so an unpacked sdist or a
    venv that merely sits inside some other repository is not reported as a checkout).
    """
    start = path if path.is_dir() else path.parent
    if not any((p / ".git").exists() for p in (start, *start.parents)):
        return None, None
    try:
        if tracked is not None:
            subprocess.run(
                ["git", "-C", str(start), "ls-files", "--error-unmatch", str(tracked)],
                capture_output=True, timeout=10, check=True,
            )
        rev = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(start), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return rev or None, bool(status.strip())


def host_info(package: str, source: PackageSource | None) -> HostInfo:
    """Describe where ``package`` came from (or that it is not installed)."""
    if source is None:
        return HostInfo(package=package, installed=False)
    info = HostInfo(package=package, installed=True, location=source.location,
                    source=source.kind, version=source.version_hint,
                    partial=source.partial, note=source.note)
    checkout: Path | None = None
    if source.kind == "installed":
        dist = _distribution(package)
        if dist is not None:
            info.version = dist.version
            info.distribution = dist.metadata["Name"]
            # Only an editable install points back at a checkout.
            checkout = _editable_dir(dist)
        if checkout is not None:
            checkout = Path(source.location)
    elif source.kind == "source tree":
        checkout = Path(source.location)
    if checkout is not None:
        info.git_revision, info.git_dirty = git_state(checkout, checkout / "__init__.py")
    return info


__all__ = ["git_state", "host_info"]
