"""Profiles in the vllm-hust-vspec 0.14 format, converted exactly to schema v1 on load.

That format is recognised by its keys: a ``target`` (or ``draft``) object with keys in
milliseconds (``alpha_ms_per_context_token``, ``gamma_ms_per_batched_token``, ``delta_ms``).
Its step latency at gamma ``k``, batch ``B`` and ``C`` context tokens summed over the batch::

    fwd(C, n) = alpha * C + gamma * n + delta                       (ms, one forward)
    step_ms   = target.fwd(C, B * (k + 1)) + per_gamma_overhead_ms[k]
                + sum_{i<k} draft.fwd(C + i * B, B)     (serial drafting)
                  or draft.fwd(C, B * (k + 1)) if k > 0   (draft_parallel)

maps term by term onto :class:`Profile`: ``delta`` -> ``constant_s``, ``gamma`` ->
``per_batched_token_s``, ``alpha`` -> ``per_context_token_s`` (each divided by 1000), the
growing draft context -> ``draft_context_growth = 1``, ``draft_parallel`` -> itself,
``per_gamma_overhead_ms`` -> ``gamma_step_overhead_s`` (indexed by gamma), so
``Profile.step_time(B, k, C) == step_ms / 1000`` up to float rounding.

``batch_gamma_policy`` (bucket upper bound -> gamma; batches above the largest bound use its
gamma) becomes ``batch_gamma_table`` rows ``[previous bound + 1, bound, gamma]`` with an open
last row, in ``preferred`` mode (the profile policy's default gamma, left only when the model
predicts a better arm by the hysteresis margin). ``default_acceptance_rate`` (a per-position
conditional rate) becomes ``default_acceptance``, ``initial_gamma`` the policy's start.
``max_speculative_tokens`` bounds the other keys as before but is otherwise not used: a
warning names it. Unknown keys and bad values raise :class:`ProfileError` naming the file
and the dotted key.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping

from .profile import LatencyCoefficients, Profile, TableEntry, _Reader

logger = logging.getLogger(__name__)

_MS_KEY = re.compile(r"_ms(_|$)")
_FORWARD_KEYS = ("alpha_ms_per_context_token", "gamma_ms_per_batched_token", "delta_ms")
# The 0.14 loader's default when default_acceptance_rate is absent.
_DEFAULT_ACCEPTANCE_RATE = 0.7


def is_v014_profile(data: object) -> bool:
    """True when ``data`` is in the 0.14 format: its ``target`` or ``draft`` object has a key
    in milliseconds (``..._ms`` or ``..._ms_...``)."""
    if not isinstance(data, Mapping):
        return False
    for part in ("target", "draft"):
        table = data.get(part)
        if isinstance(table, Mapping) and any(
            isinstance(k, str) and _MS_KEY.search(k) for k in table
        ):
            return True
    return False


def convert_v014(data: object, *, source: str = "<profile>") -> Profile:
    """Validate a 0.14-format mapping and return the equivalent schema-v1 :class:`Profile`.

    Errors (unknown keys, bad values) raise :class:`ProfileError` naming ``source`` and the
    key; the one key with no schema-v1 counterpart (``max_speculative_tokens``) is logged as
    deprecated with a warning naming it.
    """
    r = _Reader(data, "", source)
    version = r.integer("schema_version", 1, lo=1)
    if version != 1:
        raise r.error("schema_version", f"unsupported version {version} of the 0.14 format "
                      "(only 1 exists)")
    max_gamma = r.integer("max_speculative_tokens", lo=1)
    rate = r.number("default_acceptance_rate", _DEFAULT_ACCEPTANCE_RATE)
    if rate > 1.0:
        raise r.error("default_acceptance_rate", f"expected a probability in [0, 1], got {rate}")
    initial = r.integer("initial_gamma", max_gamma, lo=0)
    if initial > max_gamma:
        raise r.error("initial_gamma", f"must be <= max_speculative_tokens ({max_gamma}), "
                      f"got {initial}")
    target = _forward(r.child("target"))
    draft = _forward(r.child("draft"))
    parallel = r.boolean("draft_parallel", False)
    overhead = _overhead(r, max_gamma)
    table = _policy(r, max_gamma)
    r.finish()
    logger.warning(
        "%s: key 'max_speculative_tokens' is deprecated and not used: the converted latency "
        "model covers every gamma and --gamma sets the range (it is no longer checked against "
        "%d); the profile is in the vllm-hust-vspec 0.14 format (milliseconds), converted "
        "to schema v1 on load", source, max_gamma)
    return Profile(
        target=target,
        draft=draft,
        default_acceptance=(rate,),
        batch_gamma_table=table,
        batch_gamma_table_mode="preferred",
        draft_parallel=parallel,
        draft_context_growth=0.0 if parallel else 1.0,
        gamma_step_overhead_s=overhead,
        initial_gamma=initial,
        notes="converted from the vllm-hust-vspec 0.14 profile format",
    )


def _forward(r: _Reader) -> LatencyCoefficients:
    """One forward's ms coefficients as seconds; it must predict a positive time."""
    alpha, gamma, delta = (r.number(k, 0.0) for k in _FORWARD_KEYS)
    r.finish()
    if alpha + gamma + delta <= 0.0:
        raise r.error("delta_ms", "the forward must take a positive time: set delta_ms, "
                      "gamma_ms_per_batched_token or alpha_ms_per_context_token above 0")
    return LatencyCoefficients(constant_s=delta / 1000.0, per_batched_token_s=gamma / 1000.0,
                               per_context_token_s=alpha / 1000.0)


def _int_keys(r: _Reader, key: str, lo: int, hi: int | None) -> list[tuple[int, object]]:
    """An object with decimal-integer keys in [lo, hi], as sorted (int key, value) pairs."""
    value = r._get(key, False)
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise r.error(key, f"expected a JSON object, got {value!r}")
    out: dict[int, object] = {}
    for raw, item in value.items():
        try:
            k = int(raw)
        except (TypeError, ValueError):
            raise r.error(f"{key}.{raw}", "expected an integer key") from None
        if k < lo or (hi is not None and k > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise r.error(f"{key}.{raw}", f"key must be {bound}, got {k}")
        if k in out:
            raise r.error(f"{key}.{raw}", f"{k} is given twice")
        out[k] = item
    return sorted(out.items())


def _overhead(r: _Reader, max_gamma: int) -> tuple[float, ...]:
    """``per_gamma_overhead_ms`` ({gamma: ms}) as seconds indexed by gamma (missing: 0)."""
    key = "per_gamma_overhead_ms"
    pairs = _int_keys(r, key, 0, max_gamma)
    if not pairs:
        return ()
    out = [0.0] * (pairs[-1][0] + 1)
    for gamma, ms in pairs:
        if (isinstance(ms, bool) or not isinstance(ms, int | float) or not math.isfinite(ms)
                or ms < 0):
            raise r.error(f"{key}.{gamma}", f"expected a finite number >= 0, got {ms!r}")
        out[gamma] = float(ms) / 1000.0
    return tuple(out)


def _policy(r: _Reader, max_gamma: int) -> tuple[TableEntry, ...]:
    """``batch_gamma_policy`` ({upper bound: gamma}) as table rows, the last one open."""
    key = "batch_gamma_policy"
    pairs = _int_keys(r, key, 1, None)
    rows: list[TableEntry] = []
    lo = 1
    for i, (bound, gamma) in enumerate(pairs):
        if isinstance(gamma, bool) or not isinstance(gamma, int) or not 0 <= gamma <= max_gamma:
            raise r.error(f"{key}.{bound}", f"expected an integer gamma in [0, "
                          f"max_speculative_tokens={max_gamma}], got {gamma!r}")
        hi = None if i == len(pairs) - 1 else bound
        rows.append(TableEntry(lo, hi, gamma))
        lo = bound + 1
    return tuple(rows)


__all__ = ["convert_v014", "is_v014_profile"]
