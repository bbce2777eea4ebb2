"""Compact JSON Lines encoding for the traces the plugin writes from inside vLLM processes.

msgspec (a vLLM requirement) encodes a batch of records in one C call, an order of magnitude
faster than :mod:`json`; that matters because the trace threads share the GIL with the engine
loop. Both write one compact UTF-8 line per record that parses to the same object (str keys;
str, int, float, bool, None, list and dict values; floats round-trip exactly, though an
exponent may be spelt differently: ``1e-05`` / ``0.00001``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

try:
    import msgspec
except ImportError:  # not a vLLM host: the standard library does it, slower
    msgspec = None  # type: ignore[assignment]

EncodeError: tuple[type[Exception], ...] = (TypeError, ValueError)
if msgspec is not None:
    _ENCODER = msgspec.json.Encoder()
    EncodeError = (*EncodeError, msgspec.EncodeError)


def encode_lines(records: Iterable[dict[str, Any]]) -> bytes:
    """The records as JSON Lines (UTF-8, each line ending in a newline). Raises one of
    :data:`EncodeError` for a value JSON cannot hold."""
    if msgspec is not None:
        return _ENCODER.encode_lines(records)
    return "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n"
                   for r in records).encode()


__all__ = ["EncodeError", "encode_lines"]
