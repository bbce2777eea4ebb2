"""What the optional plots share: loading matplotlib on demand and a moving average.

Pure Python (matplotlib is imported only when a plot is asked for), so the simulator may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

INSTALL_HINT = "pip install vllm-hust-vspec[bench]"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def load_pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or :class:`PlotUnavailable`."""
    try:
        # optional dependency, imported on demand (and untyped for mypy either way)
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError:
        raise PlotUnavailable(f"--plot needs matplotlib: {INSTALL_HINT}") from None


def moving_average(values: Sequence[float], width: int) -> list[float]:
    """Trailing mean over the last ``width`` values (fewer at the start)."""
    out: list[float] = []
    acc = 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= width:
            acc -= values[i - width]
        out.append(acc / min(i + 1, width))
    return out
