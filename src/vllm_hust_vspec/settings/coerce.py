"""Turning raw values (TOML natives, environment strings, CLI strings) into typed option values."""

from __future__ import annotations

import math
import shlex
from typing import Any

from vllm_hust_vspec.settings.fields import METHOD_ALIASES, TABLES, OptionInfo


class SettingsError(ValueError):
    """A bad option value, key or combination; the message names where it came from."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"", "none", "null"}


def coerce(opt: OptionInfo, raw: Any, where: str) -> Any:
    """Convert ``raw`` to the option's type and check choices and range.

    ``where`` names the source (file and key, environment variable or flag) for the error.
    """
    if isinstance(raw, str) and opt.optional and raw.strip().lower() in _NONE:
        return None
    if opt.kind == "table":
        return coerce_tuning(opt.name, raw, where)
    if opt.bare is not None and (isinstance(raw, bool) or (
            isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE)):
        # A switch-style value of a path option (the predecessor's boolean spelling).
        return opt.bare if _to_bool(raw) else None
    value = _convert(opt, raw, where)
    if opt.off is not None and value == opt.off and not isinstance(value, bool):
        return None  # the predecessor's "off" spelling (e.g. top-K 1) is the default
    if opt.name == "method" and isinstance(value, str):
        value = METHOD_ALIASES.get(value, value)
    if opt.choices is not None and value not in opt.choices:
        allowed = ", ".join(opt.choices)
        raise SettingsError(f"{where}: {opt.name}={value!r} is not one of: {allowed}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingsError(f"{where}: {opt.name} must be a finite number, got {raw!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if opt.minimum is not None and value < opt.minimum:
            raise SettingsError(f"{where}: {opt.name}={value} is below the minimum {opt.minimum}")
        if opt.maximum is not None and value > opt.maximum:
            raise SettingsError(f"{where}: {opt.name}={value} is above the maximum {opt.maximum}")
    return value


def coerce_tuning(name: str, raw: Any, where: str) -> dict[str, Any]:
    """Read a table option (``adaptive_tuning``, ``vllm``, ...): a TOML table, or
    ``key=value,...`` (flags and environment). Every key is checked before any model loads; a
    value "none" unsets the key (None)."""
    keys = TABLES[name]
    if isinstance(raw, str):
        pairs: dict[str, Any] = {}
        for part in raw.replace(";", ",").split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            if not sep:
                raise SettingsError(f"{where}: {name} takes key=value pairs, got {part!r}"
                                    f" (keys: {', '.join(keys)})")
            pairs[key.strip()] = value.strip()
        raw = pairs
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: {name} must be a table of key = value (keys:"
                            f" {', '.join(keys)}), got {raw!r}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        spec = keys.get(key)
        if spec is None:
            raise SettingsError(f"{where}: {name} has no key {key!r}; allowed keys:"
                                f" {', '.join(keys)}")
        if value is None:  # an old name's "none" (settings/legacy.py): unsets the key
            out[key] = None
            continue
        opt = OptionInfo(name=f"{name}.{key}", kind=spec.kind, optional=True,
                         default=spec.default, help=spec.help, group="",
                         choices=spec.choices, minimum=spec.minimum, maximum=spec.maximum,
                         metavar=None)
        out[key] = coerce(opt, value, where)
    return out


def _convert(opt: OptionInfo, raw: Any, where: str) -> Any:
    kind = opt.kind
    try:
        if kind == "bool":
            return _to_bool(raw)
        if kind == "int":
            if isinstance(raw, (bool, float)):
                raise TypeError
            return int(raw)
        if kind == "float":
            if isinstance(raw, bool):
                raise TypeError
            return float(raw)
        if kind == "list":
            if isinstance(raw, str):
                return shlex.split(raw)
            if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
                return list(raw)
            raise TypeError
        if kind == "ints":
            return _to_ints(raw)
        if not isinstance(raw, str):
            raise TypeError
        return raw
    except (TypeError, ValueError):
        expected = {
            "bool": "a boolean (true/false, 1/0, yes/no, on/off)",
            "int": "an integer",
            "float": "a number",
            "list": "a list of strings or a shell-quoted string",
            "ints": "a list of integers (TOML array, or '1,2,3' / '1 2 3')",
            "str": "a string",
        }[kind]
        raise SettingsError(
            f"{where}: {opt.name} must be {expected}, got {raw!r}"
        ) from None


def _to_ints(raw: Any) -> list[int]:
    # Environment and flags spell int lists as "1,2,3" (or spaces); TOML gives an array.
    if isinstance(raw, str):
        return [int(part) for part in raw.replace(",", " ").split()]
    if isinstance(raw, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        return list(raw)
    raise TypeError


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError(raw)


def render_env_value(value: Any) -> str:
    """Spell a typed value the way :func:`coerce` reads it back from the environment."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict):
        return ",".join(f"{k}={render_env_value(v)}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value) and value:
            return ",".join(str(x) for x in value)
        return shlex.join(value)
    return str(value)
