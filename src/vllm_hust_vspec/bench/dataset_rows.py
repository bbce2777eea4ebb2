"""What every benchmark dataset reader shares: the request, the error and the JSONL reader."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A dataset file or option is unusable; the message names the file, line and key."""


@dataclass(frozen=True)
class BenchRequest:
    """One benchmark request: the prompt text and how many tokens to generate."""

    prompt: str
    output_tokens: int


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; errors name file and line."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read dataset: {exc.strerror or exc}") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{path}:{lineno}: not valid JSON (column {exc.colno}): {exc.msg}"
                ) from None
            if not isinstance(obj, dict):
                raise DatasetError(
                    f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
                )
            yield lineno, obj


__all__ = ["BenchRequest", "DatasetError", "iter_jsonl"]
