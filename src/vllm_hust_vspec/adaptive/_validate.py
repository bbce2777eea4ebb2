"""Validation helpers for the frozen config dataclasses (errors name the field)."""

from __future__ import annotations

import math
from dataclasses import fields


def require_int(cfg: object, name: str, lo: int) -> None:
    """Raise ValueError naming ``Config.name`` unless it is an int >= ``lo``."""
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{type(cfg).__name__}.{name} must be an int, got {value!r}")
    if value < lo:
        raise ValueError(f"{type(cfg).__name__}.{name} must be >= {lo}, got {value}")


def require_float(cfg: object, name: str, lo: float, hi: float) -> None:
    """Raise ValueError naming ``Config.name`` unless it is a finite number in [lo, hi]."""
    value = getattr(cfg, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{type(cfg).__name__}.{name} must be a finite number, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{type(cfg).__name__}.{name} must be in [{lo}, {hi}], got {value}")


def config_field_names(cls: type) -> list[str]:
    """Names of a config dataclass's fields (for override validation in the factory)."""
    return [f.name for f in fields(cls)]
