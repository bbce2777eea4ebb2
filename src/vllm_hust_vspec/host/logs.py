"""vSpec's log lines go where the host's go, formatted as the host formats them.

vLLM configures only its own ``vllm`` logger (handlers on it, ``propagate=False``), so the
``vllm_hust_vspec`` logger would otherwise reach nothing but Python's last-resort handler:
no timestamp, no level, no process, and nothing below WARNING.
"""

from __future__ import annotations

import logging
import os

PACKAGE_LOGGER = "vllm_hust_vspec"
LEVEL_ENV = "HUST_VSPEC_LOG_LEVEL"


def adopt_host_logging() -> bool:
    """Give the package logger the host's handlers and level. Idempotent.

    Leaves a logger the user configured (one with handlers of its own) alone. The level is the
    host's unless ``HUST_VSPEC_LOG_LEVEL`` names one. Returns True when handlers were attached.
    """
    ours = logging.getLogger(PACKAGE_LOGGER)
    if ours.handlers:
        return False
    try:
        import vllm.logger  # noqa: F401  (configures the "vllm" logger on import)
    except ImportError:
        return False
    host = logging.getLogger("vllm")
    if not host.handlers:  # VLLM_CONFIGURE_LOGGING=0: the user's root configuration rules
        return False
    for handler in host.handlers:
        ours.addHandler(handler)
    level = os.environ.get(LEVEL_ENV, "").strip().upper()
    ours.setLevel(level if level in logging.getLevelNamesMapping() else host.level)
    ours.propagate = False
    return True


__all__ = ["LEVEL_ENV", "PACKAGE_LOGGER", "adopt_host_logging"]
