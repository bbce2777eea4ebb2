"""Every host name vSpec's Ascend paths wrap or resolve is one the doctor checks: the source of
``host/worker/ascend`` is read for ``patcher.wrap(..., "name", ...)`` and ``req.A_*`` uses, and
each must appear among the requirement table's probes (every method, adaptive, every
feature)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vllm_hust_vspec.host.abi import requirements as req

ASCEND_DIR = (Path(__file__).resolve().parents[3] / "src" / "vllm_hust_vspec" / "host"
              / "worker" / "ascend")


def _wrapped_names() -> set[str]:
    """String method names passed to ``<patcher>.wrap(owner, "name", ...)``."""
    out: set[str] = set()
    for path in ASCEND_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "wrap" and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str)):
                out.add(node.args[1].value)
    return out


def _requirement_constants() -> set[str]:
    """Values of the ``req.A_*`` names the Ascend paths use."""
    out: set[str] = set()
    for path in ASCEND_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "req" and node.attr.startswith("A_")):
                out.add(str(getattr(req, node.attr)))
    return out


def _probed() -> set[str]:
    names: set[str] = set()
    for method in req.METHODS:
        for check in req.checks_for(method, True, req.HOSTS, req.FEATURES, facts=True):
            for alternative in check.alternatives:
                for probe in alternative:
                    names.update(n for n in (probe.module, probe.cls, probe.name) if n)
    return names


def test_the_scan_finds_the_patches() -> None:
    # Guards the scan itself: these wraps exist today, so an empty scan means it broke.
    assert {"_propose", "rejection_sample", "dispatch"} <= _wrapped_names()


@pytest.mark.parametrize("name", sorted(_wrapped_names() | _requirement_constants()))
def test_every_wrapped_or_resolved_name_is_checked(name: str) -> None:
    assert name in _probed(), (
        f"host/worker/ascend uses {name!r}, which no check in host/abi/requirements.py "
        f"probes: add it to the requirement table")
