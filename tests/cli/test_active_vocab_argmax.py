"""``vllm-hust-vspec-active-vocab`` reading the target-argmax trace of
``--eagle-target-argmax-trace-path`` (format: docs/diagnostics.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_hust_vspec.cli import active_vocab


def _write(path: Path, *records: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


HEADER = {"trace": "vspec_target_argmax", "version": 1, "run": "abc", "pid": 1,
          "started": 0.0, "method": "eagle"}
END = {"end": True, "steps": 2, "bytes": 10, "truncated": False, "dropped_writes": 0}


def test_counts_steps_and_skips_header_and_closing_lines(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.jsonl", HEADER,
                   {"step": 0, "req_ids": ["a", "b"], "token_ids": [[5, 6], [5]]},
                   {"step": 1, "req_ids": ["a"], "token_ids": [[7]]}, END,
                   HEADER, {"step": 0, "req_ids": ["c"], "token_ids": [[5]]}, END)
    assert active_vocab.count_trace(trace) == {5: 3, 6: 1, 7: 1}
    out = tmp_path / "ids.json"
    assert active_vocab.main(["--trace", str(trace), "--out", str(out), "--size", "2"]) == 0
    data = json.loads(out.read_text())
    assert data["ids"] == [5, 6] and data["counted_tokens"] == 5


def test_a_step_with_mismatched_lists_is_an_error(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.jsonl", HEADER,
                   {"step": 0, "req_ids": ["a", "b"], "token_ids": [[5, 6]]})
    with pytest.raises(ValueError, match=r"t.jsonl:2: an argmax step needs"):
        active_vocab.count_trace(trace)
    assert active_vocab.main(["--trace", str(trace), "--out", str(tmp_path / "o.json")]) == 1


def test_an_unknown_version_is_refused(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.jsonl", dict(HEADER, version=99), END)
    with pytest.raises(ValueError, match="version 99 is not supported"):
        active_vocab.count_trace(trace)


def test_generic_traces_still_read(tmp_path: Path) -> None:
    trace = _write(tmp_path / "t.jsonl", {"output_token_ids": [1, 2]}, {"token_ids": [2]})
    assert active_vocab.count_trace(trace) == {1: 1, 2: 2}
