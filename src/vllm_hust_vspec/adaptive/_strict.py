"""Strict reader for JSON objects: every key is typed, range-checked and consumed.

Input files (scenarios, traces) are user input; a typo such as ``max_gama`` must fail loudly
with the file and the dotted key path instead of silently falling back to a default. Pure
Python, shared by the layers above (``sim`` binds it to its ``ScenarioError``); a subclass
sets :attr:`StrictObject.error_type` to the exception its callers catch.
"""

from __future__ import annotations

import math
from typing import Any, Self


class StrictObject:
    """View over one JSON object that records which keys were read.

    Call :meth:`finish` after reading: any key not read is reported as unknown, together with
    the keys that are allowed at that place.
    """

    #: raised for every problem; subclasses name their own ``ValueError`` subclass
    error_type: type[ValueError] = ValueError

    def __init__(self, data: object, where: str, source: str) -> None:
        if not isinstance(data, dict):
            label = where or "the top level"
            raise self.error_type(
                f"{source}: {label} must be a JSON object, got {type(data).__name__}"
            )
        self._data: dict[str, Any] = data
        self._where = where
        self.source = source
        self._allowed: set[str] = set()

    def path(self, key: str) -> str:
        """Dotted path of ``key`` below this object (used in error messages)."""
        return f"{self._where}.{key}" if self._where else key

    def error(self, key: str, message: str) -> ValueError:
        """An error naming the file and ``key``."""
        return self.error_type(f"{self.source}: key '{self.path(key)}': {message}")

    def has(self, key: str) -> bool:
        """True when ``key`` is present (marks it as an allowed key)."""
        self._allowed.add(key)
        return key in self._data

    def raw(self, key: str) -> Any:
        """The value of a required key, untyped."""
        self._allowed.add(key)
        if key not in self._data:
            raise self.error_type(f"{self.source}: missing required key '{self.path(key)}'")
        return self._data[key]

    def number(
        self,
        key: str,
        default: float | None = None,
        *,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
    ) -> float:
        """A finite number; ``default=None`` makes the key required."""
        if not self.has(key):
            if default is None:
                raise self.error_type(f"{self.source}: missing required key '{self.path(key)}'")
            return default
        value = self._data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {value!r}")
        out = float(value)
        check_range(self, key, out, lo, hi, lo_open)
        return out

    def integer(
        self, key: str, default: int | None = None, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        """An integer; ``default=None`` makes the key required."""
        if not self.has(key):
            if default is None:
                raise self.error_type(f"{self.source}: missing required key '{self.path(key)}'")
            return default
        value = self._data[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        check_range(self, key, float(value), lo, hi, False)
        return value

    def string(
        self, key: str, default: str | None = None, *, choices: tuple[str, ...] | None = None
    ) -> str:
        """A string, optionally one of ``choices``."""
        if not self.has(key):
            if default is None:
                raise self.error_type(f"{self.source}: missing required key '{self.path(key)}'")
            return default
        value = self._data[key]
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        """A JSON boolean."""
        if not self.has(key):
            return default
        value = self._data[key]
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def numbers(self, key: str, *, lo: float | None = None, hi: float | None = None) -> list[float]:
        """A non-empty list of finite numbers."""
        value = self.raw(key)
        if not isinstance(value, list) or not value:
            raise self.error(key, f"expected a non-empty list of numbers, got {value!r}")
        out: list[float] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise self.error(key, f"item {i} must be a number, got {item!r}")
            check_range(self, f"{key}[{i}]", float(item), lo, hi, False)
            out.append(float(item))
        return out

    def strings(self, key: str) -> list[str]:
        """A list of strings (may be empty); missing means empty."""
        if not self.has(key):
            return []
        value = self._data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}")
        return list(value)

    def child(self, key: str) -> Self:
        """A required nested object."""
        return type(self)(self.raw(key), self.path(key), self.source)

    def objects(self, key: str) -> list[Self]:
        """A required non-empty list of objects."""
        value = self.raw(key)
        if not isinstance(value, list) or not value:
            raise self.error(key, "expected a non-empty list of objects")
        return [type(self)(v, f"{self.path(key)}[{i}]", self.source) for i, v in enumerate(value)]

    def finish(self) -> None:
        """Raise on any key that was never read."""
        unknown = sorted(set(self._data) - self._allowed)
        if unknown:
            allowed = ", ".join(sorted(self._allowed)) or "(none)"
            raise self.error_type(
                f"{self.source}: unknown key '{self.path(unknown[0])}' "
                f"(allowed here: {allowed})"
            )


def check_range(
    obj: StrictObject, key: str, value: float, lo: float | None, hi: float | None, lo_open: bool
) -> None:
    """Raise a keyed error when ``value`` is not finite or outside [lo, hi] / (lo, hi]."""
    if not math.isfinite(value):
        raise obj.error(key, f"must be finite, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise obj.error(key, f"must be {'>' if lo_open else '>='} {lo:g}, got {value:g}")
    if hi is not None and value > hi:
        raise obj.error(key, f"must be <= {hi:g}, got {value:g}")


__all__ = ["StrictObject", "check_range"]
