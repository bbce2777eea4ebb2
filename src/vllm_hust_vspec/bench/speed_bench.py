"""SPEED-Bench (nvidia/SPEED-Bench) rows from a local JSONL export, grouped for the bench.

One row per line, the dataset's own layout::

    {"question_id": str, "category": str, "sub_category": str, "turns": [str, ...],
     "source": str, "src_id": str, "difficulty": str, "multiturn": bool}

plus an optional ``"split"`` (``"qualitative"`` or ``"throughput_1k"`` ... ``"throughput_32k"``)
that the export recipe in docs/benchmarks.md writes. ``question_id`` and ``category`` must
be non-empty strings, ``turns`` a non-empty list of strings, ``multiturn`` a boolean; the
descriptive fields (``sub_category``, ``source``, ``src_id``, ``difficulty``) may be
``null``, as a parquet string column can hold nulls. The prompt is the first turn: later
turns would need the model's own first answer in the conversation, which a throughput
bench does not have, so multi-turn rows are sent as single-turn and counted as such.

Groups: the qualitative split groups by ``category`` (the 11 published domains first, in
the dataset's order, then any other name the file has); the throughput split groups by
input-length bucket, taken from the row's ``split`` or else the file name
(``throughput_8k.jsonl``). With neither, the rows form one group whose bucket is labelled
after the run from the measured prompt length (nearest bucket to the mean prompt tokens).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.dataset_rows import BenchRequest, DatasetError, iter_jsonl

SPLITS = ("qualitative", "throughput")
# The published qualitative domains (80 prompts each), in the dataset card's order.
QUALITATIVE_CATEGORIES = (
    "coding", "humanities", "math", "multilingual", "qa", "rag", "reasoning", "roleplay",
    "stem", "summarization", "writing",
)
# Input-length buckets of the throughput configs and their nominal prompt tokens.
BUCKET_TOKENS = {"1k": 1024, "2k": 2048, "8k": 8192, "16k": 16384, "32k": 32768}
UNBUCKETED = "unbucketed"

_REQUIRED_STR = ("question_id", "category")
_OPTIONAL_STR = ("sub_category", "source", "src_id", "difficulty")
_BUCKET_RE = re.compile(r"throughput[_-]?(\d+k)", re.IGNORECASE)


@dataclass(frozen=True)
class SpeedBenchRow:
    """One validated SPEED-Bench row and where it came from."""

    question_id: str
    category: str
    prompt: str  # the first turn
    turns: int  # how many user turns the row has (only the first is sent)
    multiturn: bool
    bucket: str | None  # "1k".."32k" when the row or file names its throughput config
    line: int
    sub_category: str = ""
    source: str = ""
    src_id: str = ""
    difficulty: str = ""


@dataclass
class SpeedBenchFile:
    """All rows of one file, with the split they are read as."""

    path: Path
    split: str
    rows: list[SpeedBenchRow] = field(default_factory=list)

    def groups(self) -> dict[str, list[SpeedBenchRow]]:
        """Rows per group (category or bucket), in report order."""
        out: dict[str, list[SpeedBenchRow]] = {}
        for row in self.rows:
            out.setdefault(group_of(row, self.split), []).append(row)
        return {g: out[g] for g in sorted(out, key=lambda g: _group_rank(g, self.split))}

    def multiturn_rows(self) -> int:
        """Rows with more than one user turn (sent with their first turn only)."""
        return sum(1 for r in self.rows if r.turns > 1)


def _bucket_name(text: str) -> str | None:
    m = _BUCKET_RE.search(text)
    if m and m.group(1).lower() in BUCKET_TOKENS:
        return m.group(1).lower()
    return None


def _group_rank(group: str, split: str) -> tuple[int, float, str]:
    if split == "qualitative":
        known = group in QUALITATIVE_CATEGORIES
        return (0 if known else 1, QUALITATIVE_CATEGORIES.index(group) if known else 0, group)
    return (0 if group in BUCKET_TOKENS else 1, BUCKET_TOKENS.get(group, math.inf), group)


def group_of(row: SpeedBenchRow, split: str) -> str:
    """The report group of a row: its category (qualitative) or its bucket (throughput)."""
    if split == "qualitative":
        return row.category
    return row.bucket or UNBUCKETED


def bucket_for_tokens(prompt_tokens: float) -> str:
    """Nearest throughput bucket (on a log scale) to a measured mean prompt length."""
    if prompt_tokens <= 0:
        return UNBUCKETED
    return min(BUCKET_TOKENS, key=lambda b: abs(math.log(prompt_tokens / BUCKET_TOKENS[b])))


def parse_row(
    obj: dict[str, Any], path: Path, lineno: int, file_bucket: str | None = None
) -> SpeedBenchRow:
    """Validate one row; errors name ``file:line`` and the field."""
    where = f"{path}:{lineno}"
    for key in _REQUIRED_STR:
        if key not in obj:
            raise DatasetError(f"{where}: missing field '{key}' (a SPEED-Bench row needs "
                               "question_id, category, turns, multiturn)")
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise DatasetError(
                f"{where}: field '{key}' must be a non-empty string, got {obj[key]!r}")
    extra: dict[str, str] = {}
    for key in _OPTIONAL_STR:
        value = obj.get(key)
        if value is not None and not isinstance(value, str):
            raise DatasetError(f"{where}: field '{key}' must be a string or null, got {value!r}")
        extra[key] = value or ""
    turns = obj.get("turns")
    if "turns" not in obj:
        raise DatasetError(f"{where}: missing field 'turns' (a list of the user turns)")
    if (not isinstance(turns, list) or not turns
            or not all(isinstance(t, str) for t in turns) or not turns[0].strip()):
        raise DatasetError(
            f"{where}: field 'turns' must be a non-empty list of strings with a non-empty "
            f"first turn, got {str(turns)[:80]!r}")
    if "multiturn" not in obj:
        raise DatasetError(f"{where}: missing field 'multiturn' (true or false)")
    if not isinstance(obj["multiturn"], bool):
        raise DatasetError(
            f"{where}: field 'multiturn' must be true or false, got {obj['multiturn']!r}")
    split = obj.get("split")
    if split is not None and not isinstance(split, str):
        raise DatasetError(f"{where}: field 'split' must be a string, got {split!r}")
    bucket = _bucket_name(split) if split else None
    if split and bucket is None and split != "qualitative":
        raise DatasetError(
            f"{where}: field 'split' is {split!r}; expected 'qualitative' or "
            f"throughput_<{'|'.join(BUCKET_TOKENS)}>")
    return SpeedBenchRow(
        question_id=obj["question_id"], category=obj["category"], prompt=turns[0],
        turns=len(turns), multiturn=obj["multiturn"], bucket=bucket or file_bucket,
        line=lineno, **extra,
    )


def load_speed_bench(path: str | Path, split: str | None = None) -> SpeedBenchFile:
    """Read and validate a SPEED-Bench JSONL export.

    ``split`` None picks ``throughput`` when a row's ``split`` field or the file name names
    a throughput config, else ``qualitative``.
    """
    if split is not None and split not in SPLITS:
        raise DatasetError(
            f"--speed-bench-split must be one of {', '.join(SPLITS)}, got {split!r}")
    p = Path(path)
    file_bucket = _bucket_name(p.name)
    rows = [parse_row(obj, p, lineno, file_bucket) for lineno, obj in iter_jsonl(p)]
    if not rows:
        raise DatasetError(f"{p}: no SPEED-Bench rows (the file has no non-blank lines)")
    if split is None:
        split = "throughput" if any(r.bucket for r in rows) else "qualitative"
    return SpeedBenchFile(path=p, split=split, rows=rows)


def group_requests(
    rows: list[SpeedBenchRow], *, num_prompts: int, output_tokens: int, shuffle: bool = False,
    seed: int = 0,
) -> list[BenchRequest]:
    """``num_prompts`` requests from one group's rows (cycled when the group is smaller)."""
    pool = list(rows)
    if shuffle:
        random.Random(seed).shuffle(pool)
    return [BenchRequest(prompt=pool[i % len(pool)].prompt, output_tokens=output_tokens)
            for i in range(num_prompts)]


__all__ = [
    "BUCKET_TOKENS",
    "QUALITATIVE_CATEGORIES",
    "SPLITS",
    "UNBUCKETED",
    "SpeedBenchFile",
    "SpeedBenchRow",
    "bucket_for_tokens",
    "group_of",
    "group_requests",
    "load_speed_bench",
    "parse_row",
]
