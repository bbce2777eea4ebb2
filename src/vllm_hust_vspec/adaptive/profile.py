"""Offline profile (JSON schema v1): a step-latency model plus default acceptance.

Latency model of one decode step at batch ``B``, gamma ``g`` and ``C`` context (KV) tokens
summed over the batch::

    target(n, C) = target.constant_s + target.per_batched_token_s * n
                   + target.per_context_token_s * C              with n = B * (1 + g)
    draft(B, C)  = draft.constant_s + draft.per_batched_token_s * B
                   + draft.per_context_token_s * C               (one draft forward)
    step_s       = target(B * (1 + g), C) + g * (draft(B, C) + per_gamma_overhead_s)

The schema is documented with an example in docs/controller.md. Parsing is strict: unknown
keys and bad values raise :class:`ProfileError` naming the file and the dotted key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._files import read_utf8_text
from ._strict import StrictObject
from .acceptance import extend_acceptance

SCHEMA_VERSION = 1


class ProfileError(ValueError):
    """A profile is invalid; the message names the file (when known) and the key."""


@dataclass(frozen=True, slots=True)
class LatencyCoefficients:
    """Seconds = constant_s + per_batched_token_s * tokens + per_context_token_s * context."""

    constant_s: float = 0.0
    per_batched_token_s: float = 0.0
    per_context_token_s: float = 0.0

    def seconds(self, tokens: float, context_tokens: float) -> float:
        """Latency of one forward over ``tokens`` query tokens and ``context_tokens`` KV."""
        return (self.constant_s + self.per_batched_token_s * tokens
                + self.per_context_token_s * context_tokens)

    def to_dict(self) -> dict[str, float]:
        """JSON form."""
        return {
            "constant_s": self.constant_s,
            "per_batched_token_s": self.per_batched_token_s,
            "per_context_token_s": self.per_context_token_s,
        }


@dataclass(frozen=True, slots=True)
class TableEntry:
    """Batch sizes ``lo..hi`` (inclusive) use ``gamma``."""

    lo: int
    hi: int
    gamma: int


@dataclass(frozen=True, slots=True)
class FitInfo:
    """How a fitted profile was obtained (written by the fitter, informational)."""

    num_samples: int
    residual_rmse_s: float
    relative_residual: float


@dataclass(frozen=True, slots=True)
class Profile:
    """A parsed schema-v1 profile."""

    target: LatencyCoefficients
    draft: LatencyCoefficients
    per_gamma_overhead_s: float = 0.0
    assumed_context_tokens: int = 0
    # Unconditional per-position acceptance p[k]; extended geometrically past its end.
    default_acceptance: tuple[float, ...] = (0.6,)
    batch_gamma_table: tuple[TableEntry, ...] = ()
    name: str = ""
    method: str = ""
    notes: str = ""
    fit: FitInfo | None = None

    def step_time(self, batch: int, gamma: int, context_tokens: float | None = None) -> float:
        """Predicted seconds of one decode step (``context_tokens`` summed over the batch;
        default ``batch * assumed_context_tokens``)."""
        ctx = batch * self.assumed_context_tokens if context_tokens is None else context_tokens
        t = self.target.seconds(batch * (1 + gamma), ctx)
        if gamma > 0:
            t += gamma * (self.draft.seconds(batch, ctx) + self.per_gamma_overhead_s)
        return t

    def acceptance(self, positions: int) -> tuple[float, ...]:
        """Default acceptance for ``positions`` draft positions."""
        return tuple(extend_acceptance(self.default_acceptance, positions))

    def table_gamma(self, batch: int) -> int | None:
        """Gamma from ``batch_gamma_table`` for this batch size, or None if not covered."""
        for e in self.batch_gamma_table:
            if e.lo <= batch <= e.hi:
                return e.gamma
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (schema v1); ``Profile.from_dict(p.to_dict()) == p``."""
        out: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
        if self.name:
            out["name"] = self.name
        if self.method:
            out["method"] = self.method
        if self.notes:
            out["notes"] = self.notes
        out["target"] = self.target.to_dict()
        out["draft"] = self.draft.to_dict()
        out["per_gamma_overhead_s"] = self.per_gamma_overhead_s
        out["assumed_context_tokens"] = self.assumed_context_tokens
        out["default_acceptance"] = list(self.default_acceptance)
        if self.batch_gamma_table:
            out["batch_gamma_table"] = [[e.lo, e.hi, e.gamma] for e in self.batch_gamma_table]
        if self.fit is not None:
            out["fit"] = {
                "num_samples": self.fit.num_samples,
                "residual_rmse_s": self.fit.residual_rmse_s,
                "relative_residual": self.fit.relative_residual,
            }
        return out

    @classmethod
    def from_dict(cls, data: object, *, source: str = "<profile>") -> Profile:
        """Parse and validate a schema-v1 mapping; errors name ``source`` and the key."""
        r = _Reader(data, "", source)
        version = r.integer("schema_version", lo=1)
        if version != SCHEMA_VERSION:
            raise r.error("schema_version", f"unsupported version {version}; this build reads "
                          f"schema_version {SCHEMA_VERSION}")
        target = _coefficients(r.child("target"))
        draft = _coefficients(r.child("draft"))
        overhead = r.number("per_gamma_overhead_s", 0.0)
        context = r.integer("assumed_context_tokens", 0, lo=0)
        acceptance = _acceptance(r)
        table = _table(r)
        name = r.string("name", "")
        method = r.string("method", "")
        notes = r.string("notes", "")
        fit = None
        if r.present("fit"):
            f = r.child("fit")
            fit = FitInfo(
                num_samples=f.integer("num_samples", lo=0),
                residual_rmse_s=f.number("residual_rmse_s"),
                relative_residual=f.number("relative_residual"),
            )
            f.finish()
        r.finish()
        return cls(
            target=target, draft=draft, per_gamma_overhead_s=overhead,
            assumed_context_tokens=context, default_acceptance=acceptance,
            batch_gamma_table=table, name=name, method=method, notes=notes, fit=fit,
        )


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile JSON file; errors name the file and the key."""
    p = Path(path)
    text = read_utf8_text(p, "profile", ProfileError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}): "
                           f"{exc.msg}") from None
    return Profile.from_dict(data, source=str(p))


# -- strict reading -------------------------------------------------------------------------


class _Reader(StrictObject):
    """One profile object being read (the shared strict reader, with the profile's own
    wording: every quantity is a finite number >= 0, and error texts as documented in
    docs/controller.md)."""

    error_type = ProfileError

    def __init__(self, data: object, where: str, source: str) -> None:
        if not isinstance(data, Mapping):
            label = f"key '{where}'" if where else "the top level"
            raise ProfileError(f"{source}: {label} must be a JSON object, "
                               f"got {type(data).__name__}")
        super().__init__(dict(data), where, source)

    def present(self, key: str) -> bool:
        return self.has(key)

    def _get(self, key: str, required: bool) -> Any:
        if required:
            return self.raw(key)
        return self.raw(key) if self.has(key) else None

    def number(self, key: str, default: float | None = None, **_: Any) -> float:
        """A finite number >= 0 (all profile quantities are non-negative)."""
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise self.error(key, f"expected a finite number >= 0, got {value!r}")
        return float(value)

    def integer(self, key: str, default: int | None = None, *, lo: int | None = 0,
                hi: int | None = None) -> int:
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if lo is not None and value < lo:
            raise self.error(key, f"expected an integer >= {lo}, got {value}")
        return value

    def finish(self) -> None:
        unknown = sorted(k for k in self._data if k not in self._allowed)
        if unknown:
            allowed = ", ".join(sorted(self._allowed))
            raise self.error(unknown[0], f"unknown key (allowed here: {allowed})")


def _coefficients(r: _Reader) -> LatencyCoefficients:
    out = LatencyCoefficients(
        constant_s=r.number("constant_s", 0.0),
        per_batched_token_s=r.number("per_batched_token_s", 0.0),
        per_context_token_s=r.number("per_context_token_s", 0.0),
    )
    r.finish()
    return out


def _acceptance(r: _Reader) -> tuple[float, ...]:
    key = "default_acceptance"
    value = r._get(key, False)
    if value is None:
        return (0.6,)
    values = [value] if isinstance(value, int | float) and not isinstance(value, bool) else value
    if not isinstance(values, list) or not values:
        raise r.error(key, "expected a probability or a non-empty list of per-position "
                      f"probabilities, got {value!r}")
    prev = 1.0
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
            raise r.error(f"{key}[{i}]", f"expected a probability in [0, 1], got {v!r}")
        if v > prev + 1e-12:
            raise r.error(f"{key}[{i}]", f"unconditional acceptance must not increase with "
                          f"position ({v} > {prev}); give P(positions 0..k all accepted)")
        prev = float(v)
    return tuple(float(v) for v in values)


def _table(r: _Reader) -> tuple[TableEntry, ...]:
    key = "batch_gamma_table"
    value = r._get(key, False)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.error(key, f"expected a list of [lo, hi, gamma] rows, got {value!r}")
    out: list[TableEntry] = []
    for i, row in enumerate(value):
        if (not isinstance(row, list) or len(row) != 3
                or any(isinstance(v, bool) or not isinstance(v, int) for v in row)):
            raise r.error(f"{key}[{i}]", f"expected [lo, hi, gamma] integers, got {row!r}")
        lo, hi, gamma = row
        if lo < 1 or hi < lo or gamma < 0:
            raise r.error(f"{key}[{i}]", f"need 1 <= lo <= hi and gamma >= 0, got {row!r}")
        if out and lo <= out[-1].hi:
            raise r.error(f"{key}[{i}]", "rows must be sorted by batch size and not overlap")
        out.append(TableEntry(lo, hi, gamma))
    return tuple(out)
