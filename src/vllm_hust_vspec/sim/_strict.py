"""The strict JSON reader of scenario and trace files, raising :class:`ScenarioError`.

The reader itself is :mod:`vllm_hust_vspec.adaptive._strict` (pure Python, one copy for every
layer); this module binds it to the simulator's exception.
"""

from __future__ import annotations

from ..adaptive import _strict
from ..adaptive._strict import check_range


class ScenarioError(ValueError):
    """A scenario or trace is invalid. The message names the file and the dotted key."""


class StrictObject(_strict.StrictObject):
    """:class:`vllm_hust_vspec.adaptive._strict.StrictObject` raising :class:`ScenarioError`."""

    error_type = ScenarioError


__all__ = ["ScenarioError", "StrictObject", "check_range"]
