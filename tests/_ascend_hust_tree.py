"""Locate the saved vLLM-Ascend-HUST reference sources for tests.

``ascend_hust_tree()`` returns the partial fork tree (``vllm_ascend/...`` files, byte-exact);
``ascend_hust_upstream_comparison()`` returns the upstream vllm-ascend checkout it is compared
with. Both skip the calling test, naming where they looked, when the folder is absent: the
references live outside the repository and are not on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV_TREE = "VSPEC_ASCEND_HUST_TREE"
ENV_UPSTREAM = "VSPEC_ASCEND_UPSTREAM_COMPARISON"
_REFERENCE_SUBDIR = Path("shared") / "reference" / "vllm-ascend-hust"
_UPSTREAM_NAME = "vllm-project_vllm-ascend@182b75ea84"


def _candidates(env: str, tail: Path) -> list[Path]:
    found: list[Path] = []
    if os.environ.get(env):
        found.append(Path(os.environ[env]))
    found.append(REPO.parent / _REFERENCE_SUBDIR / tail)
    found.append(Path("/work") / _REFERENCE_SUBDIR / tail)
    return found


def _first_dir(env: str, tail: Path, what: str) -> Path:
    candidates = _candidates(env, tail)
    for path in candidates:
        if path.is_dir():
            return path.resolve()
    looked = ", ".join(str(p) for p in candidates)
    pytest.skip(f"{what} not found (looked in {looked}); set ${env} to its folder")


def ascend_hust_tree() -> Path:
    """Path of the saved vLLM-Ascend-HUST tree (``$VSPEC_ASCEND_HUST_TREE`` first).

    Skips the calling test when no candidate folder exists.
    """
    return _first_dir(ENV_TREE, Path("tree"), "vLLM-Ascend-HUST reference tree")


def ascend_hust_upstream_comparison() -> Path:
    """Path of the upstream vllm-ascend checkout saved beside the fork's tree.

    ``$VSPEC_ASCEND_UPSTREAM_COMPARISON`` wins; skips the calling test when none exists.
    """
    return _first_dir(ENV_UPSTREAM, Path("upstream-comparison") / _UPSTREAM_NAME,
                      "upstream vllm-ascend comparison checkout")
