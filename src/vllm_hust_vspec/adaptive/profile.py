"""Offline profile (JSON schema v1): a step-latency model plus default acceptance.

Latency model of one decode step at batch ``B``, gamma ``g`` and ``C`` context (KV) tokens
summed over the batch::

    target(n, C) = target.constant_s + target.per_batched_token_s * n
                   + target.per_context_token_s * C              with n = B * (1 + g)
    draft(n, C)  = draft.constant_s + draft.per_batched_token_s * n
                   + draft.per_context_token_s * C               (one draft forward)
    drafting     = sum_{i<g} draft(B, C + i * B * draft_context_growth)   (serial, default)
                 = draft(B * (1 + g), C) if g > 0 else 0                 (draft_parallel)
    step_s       = target(B * (1 + g), C) + drafting + g * per_gamma_overhead_s
                   + gamma_step_overhead_s[g]        (0 past the list's end)

``draft_context_growth`` (default 0) is the context each successive serial draft forward adds
per request (1: forward ``i`` attends to the ``i`` tokens drafted before it);
``draft_parallel`` drafts all ``g`` tokens in one forward (block drafters such as DFlash).

The schema is documented with an example in docs/controller.md. Parsing is strict: unknown
keys and bad values raise :class:`ProfileError` naming the file and the dotted key. A file in
the vllm-hust-vspec 0.14 profile format (milliseconds; see :mod:`.profile_v014`) is recognised
by its keys and converted exactly on load (:mod:`.profile_file`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._strict import StrictObject
from .acceptance import extend_acceptance

SCHEMA_VERSION = 1
# How the profile policy uses batch_gamma_table (ProfileConfig.table_steps is the warm-up):
# "warmup": the table decides during the warm-up only, the latency model afterwards;
# "preferred": the table's gamma is also the default afterwards, left only for an arm the
# model predicts to beat it by the hysteresis margin.
TABLE_MODES: tuple[str, ...] = ("warmup", "preferred")


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
    """Batch sizes ``lo..hi`` (inclusive; ``hi`` None: every batch from ``lo`` up) use
    ``gamma``."""

    lo: int
    hi: int | None
    gamma: int

    def covers(self, batch: int) -> bool:
        """True when ``batch`` falls in this row."""
        return self.lo <= batch and (self.hi is None or batch <= self.hi)


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
    # One draft forward over B * (1 + g) tokens instead of g forwards of B tokens.
    draft_parallel: bool = False
    # Context tokens per request each successive serial draft forward adds.
    draft_context_growth: float = 0.0
    # Extra seconds of a whole step at gamma g (index g); gammas past the end add 0.
    gamma_step_overhead_s: tuple[float, ...] = ()
    batch_gamma_table_mode: str = "warmup"
    # The gamma the profile policy starts from (None: its max_gamma).
    initial_gamma: int | None = None

    def step_time(self, batch: int, gamma: int, context_tokens: float | None = None) -> float:
        """Predicted seconds of one decode step (``context_tokens`` summed over the batch;
        default ``batch * assumed_context_tokens``)."""
        ctx = batch * self.assumed_context_tokens if context_tokens is None else context_tokens
        t = self.target.seconds(batch * (1 + gamma), ctx)
        if gamma > 0:
            if self.draft_parallel:
                t += (self.draft.seconds(batch * (1 + gamma), ctx)
                      + gamma * self.per_gamma_overhead_s)
            else:
                t += gamma * (self.draft.seconds(batch, ctx) + self.per_gamma_overhead_s)
                if self.draft_context_growth:
                    # forward i sees ctx + i * batch * growth: sum_{i<g} i = g * (g - 1) / 2
                    t += (self.draft.per_context_token_s * self.draft_context_growth * batch
                          * (gamma * (gamma - 1) / 2))
        if gamma < len(self.gamma_step_overhead_s):
            t += self.gamma_step_overhead_s[gamma]
        return t

    def acceptance(self, positions: int) -> tuple[float, ...]:
        """Default acceptance for ``positions`` draft positions."""
        return tuple(extend_acceptance(self.default_acceptance, positions))

    def table_gamma(self, batch: int) -> int | None:
        """Gamma from ``batch_gamma_table`` for this batch size, or None if not covered."""
        for e in self.batch_gamma_table:
            if e.covers(batch):
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
        # The extensions are written only when set, so plain profiles keep their old form.
        if self.batch_gamma_table_mode != "warmup":
            out["batch_gamma_table_mode"] = self.batch_gamma_table_mode
        if self.draft_parallel:
            out["draft_parallel"] = True
        if self.draft_context_growth:
            out["draft_context_growth"] = self.draft_context_growth
        if self.gamma_step_overhead_s:
            out["gamma_step_overhead_s"] = list(self.gamma_step_overhead_s)
        if self.initial_gamma is not None:
            out["initial_gamma"] = self.initial_gamma
        if self.fit is not None:
            out["fit"] = {
                "num_samples": self.fit.num_samples,
                "residual_rmse_s": self.fit.residual_rmse_s,
                "relative_residual": self.fit.relative_residual,
            }
        return out

    @classmethod
    def from_dict(cls, data: object, *, source: str = "<profile>") -> Profile:
        """Parse and validate a schema-v1 mapping; errors name ``source`` and the key.
        :func:`~.profile_file.parse_profile` also reads the vllm-hust-vspec 0.14 format."""
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
        table_mode = r.string("batch_gamma_table_mode", "warmup", choices=TABLE_MODES)
        draft_parallel = r.boolean("draft_parallel", False)
        growth = r.number("draft_context_growth", 0.0)
        step_overhead = _step_overhead(r)
        initial = None
        if r.present("initial_gamma"):
            initial = r.integer("initial_gamma", lo=0)
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
            draft_parallel=draft_parallel, draft_context_growth=growth,
            gamma_step_overhead_s=step_overhead, batch_gamma_table_mode=table_mode,
            initial_gamma=initial,
        )


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
        # hi may be null in the last row: every larger batch.
        last = i == len(value) - 1
        if (not isinstance(row, list) or len(row) != 3
                or any(not _is_int(v) for j, v in enumerate(row)
                       if not (j == 1 and last and v is None))):
            raise r.error(f"{key}[{i}]", f"expected [lo, hi, gamma] integers (hi may be null "
                          f"in the last row), got {row!r}")
        lo, hi, gamma = row
        if lo < 1 or (hi is not None and hi < lo) or gamma < 0:
            raise r.error(f"{key}[{i}]", f"need 1 <= lo <= hi and gamma >= 0, got {row!r}")
        prev_hi = out[-1].hi if out else 0  # only the last row may be open
        if prev_hi is not None and lo <= prev_hi:
            raise r.error(f"{key}[{i}]", "rows must be sorted by batch size and not overlap")
        out.append(TableEntry(lo, hi, gamma))
    return tuple(out)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _step_overhead(r: _Reader) -> tuple[float, ...]:
    key = "gamma_step_overhead_s"
    value = r._get(key, False)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.error(key, f"expected a list of seconds indexed by gamma, got {value!r}")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise r.error(f"{key}[{i}]", f"expected a finite number >= 0, got {v!r}")
    return tuple(float(v) for v in value)
