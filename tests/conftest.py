"""Test tiers: ``./scripts/test.sh --fast`` deselects the ``engine`` and ``build`` groups."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent
# Folders whose tests run a real vLLM engine or server (or a built host pair).
_ENGINE_DIRS = ("e2e", "hust_core", "ascend_pair")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under an engine folder ``engine``."""
    for item in items:
        try:
            top = Path(str(item.path)).relative_to(_HERE).parts[0]
        except ValueError:
            continue
        if top in _ENGINE_DIRS:
            item.add_marker(pytest.mark.engine)
