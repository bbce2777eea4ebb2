"""vSpec's log lines go where the host's go, formatted as the host formats them.

vLLM configures only its own ``vllm`` logger (handlers on it, ``propagate=False``), and only
once it has parsed its arguments, which in the front end is after plugins load. So the package
logger gets one small handler that hands each record to the ``vllm`` logger at emit time:
whatever vLLM's configuration is by then (its format with time, level and process, its stream,
or the user's own when ``VLLM_CONFIGURE_LOGGING=0``), vSpec's lines follow it.
"""

from __future__ import annotations

import logging
import os

PACKAGE_LOGGER = "vllm_hust_vspec"
HOST_LOGGER = "vllm"
LEVEL_ENV = "HUST_VSPEC_LOG_LEVEL"


class ToHostLogger(logging.Handler):
    """Passes records to the host's logger, filtered by that logger's level."""

    def emit(self, record: logging.LogRecord) -> None:
        host = logging.getLogger(HOST_LOGGER)
        if record.levelno >= host.getEffectiveLevel():
            host.handle(record)


def adopt_host_logging() -> bool:
    """Route the package logger to the host's. Idempotent.

    Leaves a logger the user configured (one with handlers of its own) alone. Records below
    ``HUST_VSPEC_LOG_LEVEL`` (default INFO) are not made at all. Returns True when the route
    was added by this call.
    """
    ours = logging.getLogger(PACKAGE_LOGGER)
    if ours.handlers:
        return False
    ours.addHandler(ToHostLogger())
    level = os.environ.get(LEVEL_ENV, "").strip().upper()
    ours.setLevel(level if level in logging.getLevelNamesMapping() else logging.INFO)
    ours.propagate = False
    return True


__all__ = ["LEVEL_ENV", "PACKAGE_LOGGER", "ToHostLogger", "adopt_host_logging"]
