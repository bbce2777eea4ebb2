"""Shared helpers for the lifecycle tests: clean source copy, one build per session, venvs.

The wheel is built from a clean copy of the tree (never in place) so stale ``build/`` files or
egg-info in the checkout cannot leak into it, and the checkout is not written to.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANAGE = ROOT / "manage.sh"
RELEASE = ROOT / "release.sh"
IGNORED = {".git", ".venv", "build", "dist", ".cache", ".mypy_cache", ".pytest_cache",
           ".ruff_cache", "__pycache__"}


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in IGNORED or n.endswith((".egg-info", ".pyc"))}


def clean_copy(dst: Path) -> Path:
    """Copy the checkout without caches, venvs, build output or VCS data."""
    shutil.copytree(ROOT, dst, symlinks=True, ignore=_ignore)
    return dst


@dataclass(frozen=True)
class Artefacts:
    """A clean source copy and what was built from it (sdist is None without ``build``)."""

    source: Path
    wheel: Path
    sdist: Path | None


@functools.cache
def built_artefacts(base: Path) -> Artefacts:
    """Build the wheel (and sdist when ``build`` is importable) once per test session."""
    work = base / "lifecycle-build"
    src = clean_copy(work / "src-copy")
    out = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        check=True, capture_output=True,
    )
    sdist = None
    if importlib.util.find_spec("build") is not None:
        subprocess.run(
            [sys.executable, "-m", "build", "--sdist", "--no-isolation",
             "--skip-dependency-check", "--outdir", str(out), str(src)],
            check=True, capture_output=True,
        )
        (sdist,) = out.glob("vllm_hust_vspec-*.tar.gz")
    (wheel,) = out.glob("vllm_hust_vspec-*.whl")
    return Artefacts(src, wheel, sdist)


def base_python() -> str:
    """The interpreter the test venv was made from (so new venvs do not nest)."""
    exe = getattr(sys, "_base_executable", sys.executable)
    return exe if os.path.exists(exe) else sys.executable


def make_venv(path: Path, *, system_site: bool = False, with_pip: bool = True) -> Path:
    """Create a venv and return its python."""
    cmd = [base_python(), "-m", "venv", str(path)]
    if system_site:
        cmd.append("--system-site-packages")
    if not with_pip:
        cmd.append("--without-pip")
    subprocess.run(cmd, check=True, capture_output=True)
    return path / "bin" / "python"


def site_packages(venv: Path) -> Path:
    """The venv's site-packages directory."""
    (sp,) = (venv / "lib").glob("python3*/site-packages")
    return sp


def fake_manager(bindir: Path, log: Path) -> Path:
    """A stand-in ``vllm-hust-ext`` that logs its arguments, one call per line."""
    bindir.mkdir(parents=True, exist_ok=True)
    exe = bindir / "vllm-hust-ext"
    exe.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\necho "fake-ext $*"\n')
    exe.chmod(0o755)
    return exe


def run_script(script: Path, *args: str, env: dict[str, str] | None = None,
               path_dirs: tuple[Path, ...] = (), cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    """Run one of the operator scripts with a controlled PATH (no stray vllm-hust-ext)."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("VIRTUAL_ENV", "VSPEC_PYTHON", "VLLM_HUST_EXT", "HUST_VSPEC_ENABLED")}
    full["PATH"] = os.pathsep.join([*map(str, path_dirs), "/usr/local/bin", "/usr/bin", "/bin"])
    full.update(env or {})
    return subprocess.run([str(script), *args], capture_output=True, text=True, env=full,
                          cwd=str(cwd or ROOT), timeout=300)
