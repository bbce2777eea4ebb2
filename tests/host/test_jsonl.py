"""encode_lines: the same lines with msgspec (vLLM hosts) and with the json fallback."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import pytest

from vllm_hust_vspec.host import jsonl

RECORDS: list[dict[str, Any]] = [
    {"t": 1764902514.123456, "step": 12, "gamma": 0, "interval_s": 0.001712345,
     "reward": 37376.123456, "steady": True, "held": False, "lengths": [1, 2], "x": None,
     "host": {"graph_mode": "NONE", "capture_sizes": []}, "name": "é\"\\n",
     "tiny": 1e-05, "huge": 1.5e300},
    {},
]


def _fallback(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "msgspec", None)
    return importlib.reload(jsonl)


def test_msgspec_and_json_write_the_same_records(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("msgspec")
    fast = jsonl.encode_lines(RECORDS)
    try:
        slow = _fallback(monkeypatch).encode_lines(RECORDS)
    finally:
        monkeypatch.undo()
        importlib.reload(jsonl)
    for out in (fast, slow):
        assert out.endswith(b"\n") and out.count(b"\n") == len(RECORDS)
        assert [json.loads(line) for line in out.decode().splitlines()] == RECORDS
        assert "é".encode() in out and b" " not in out  # UTF-8, not \\u escapes; compact


@pytest.mark.parametrize("fallback", [False, True])
def test_an_unencodable_value_raises_an_encode_error(
    fallback: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _fallback(monkeypatch) if fallback else jsonl
    try:
        with pytest.raises(module.EncodeError):
            module.encode_lines([{"bad": object()}])
    finally:
        monkeypatch.undo()
        importlib.reload(jsonl)
