"""The diagnostics trace options (docs/diagnostics.md): which are set.

The worker's traces (host/worker/v1/diagnostics.py) honour them; the engine's start-up
calibration (host/engine/cost_prior/calibration.py) does not run while one is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

DRAFT_OPTIONS = ("eagle_draft_trace", "eagle_draft_io_trace_dir", "eagle_target_hidden_trace_dir")
ARGMAX_OPTION = "eagle_target_argmax_trace_path"


def requested(settings: Settings | None) -> dict[str, Any]:
    """The diagnostics options that are set (name -> value)."""
    if settings is None:
        return {}
    return {n: v for n, v in settings.diagnostics.items() if v}


__all__ = ["ARGMAX_OPTION", "DRAFT_OPTIONS", "requested"]
