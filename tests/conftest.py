"""Test tiers: ``./scripts/test.sh --fast`` deselects the ``engine`` and ``build`` groups.

``./scripts/test.sh`` runs the files on two pytest-xdist workers (``--dist loadfile``: a
file's module fixtures, its servers and engines, stay in one worker). Each worker then gets
one OpenMP thread, so two in-process engines do not spin on each other's core. Tests marked
``alone`` assert on step times a busy neighbour would distort: ``test.sh`` runs them after
the others, one at a time (``--alone=skip``, then ``--alone=only``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

_HERE = Path(__file__).parent
# Folders whose tests run a real vLLM engine or server (or a built host pair), slowest
# first: the workers start on the long files, so none is left running one alone at the end.
_ENGINE_DIRS = ("hust_core", "e2e", "ascend_pair")


def _top(item: pytest.Item) -> str:
    try:
        return Path(str(item.path)).relative_to(_HERE).parts[0]
    except ValueError:
        return ""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--alone", choices=("with", "skip", "only"), default="with",
        help="tests marked alone (they need the machine to themselves): run them with the "
             "rest (default), leave them out, or run only them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under an engine folder ``engine``; run those folders first (in the
    order of ``_ENGINE_DIRS``, files and tests otherwise in collection order). Keep or drop
    the ``alone`` tests as ``--alone`` says."""
    alone = config.getoption("--alone")
    if alone != "with":
        only = alone == "only"
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            marked = item.get_closest_marker("alone") is not None
            (kept if marked == only else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    rank = {name: i for i, name in enumerate(_ENGINE_DIRS)}
    for item in items:
        if _top(item) in rank:
            item.add_marker(pytest.mark.engine)
    items.sort(key=lambda item: rank.get(_top(item), len(rank)))
