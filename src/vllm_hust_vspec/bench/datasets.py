"""Benchmark prompts: gsm8k / arc-easy / spec_bench / speed-bench / custom JSONL and random text.

Every file is read locally (nothing is downloaded). Errors name the file, the line and the
key, e.g. ``gsm8k.jsonl:12: missing key 'question' (a gsm8k line needs "question")``.

Accepted line shapes:

* ``gsm8k``: ``{"question": str, ...}`` (the HF ``gsm8k`` main split). Prompt:
  ``"Question: <q>\\nAnswer:"``.
* ``arc-easy``: the HF ``ai2_arc`` shape ``{"question": str, "choices": {"text": [...],
  "label": [...]}}`` or the original ARC shape ``{"question": {"stem": str, "choices":
  [{"label": .., "text": ..}, ...]}}``. Prompt: question, lettered choices, ``"Answer:"``.
* ``spec_bench``: Spec-Bench ``question.jsonl`` lines ``{"turns": [str, ...], ...}``; the
  first turn is the prompt.
* ``speed-bench``: nvidia/SPEED-Bench rows ``{"question_id", "category", "turns", ...}``
  (validated by :mod:`vllm_hust_vspec.bench.speed_bench`); the first turn is the prompt.
  The bench runs these per category / length bucket (see ``speed_run``).
* ``custom``: ``{"prompt": str}`` with an optional per-line ``"output_tokens"`` (int), as
  ``vllm bench serve --dataset-name custom`` reads it.
* ``random``: no file; ``input_len`` pseudo-words per prompt from a seeded generator.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.dataset_rows import BenchRequest, DatasetError, iter_jsonl
from vllm_hust_vspec.bench.speed_bench import parse_row

DATASETS = ("gsm8k", "arc-easy", "spec_bench", "speed-bench", "custom", "random")
FILE_DATASETS = ("gsm8k", "arc-easy", "spec_bench", "speed-bench", "custom")


def _text(obj: dict[str, Any], key: str, where: str, need: str) -> str:
    if key not in obj:
        raise DatasetError(f"{where}: missing key '{key}' (a {need})")
    value = obj[key]
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: key '{key}' must be a non-empty string, got {value!r}")
    return value


def _gsm8k(obj: dict[str, Any], where: str) -> str:
    q = _text(obj, "question", where, 'gsm8k line needs "question"')
    return f"Question: {q.strip()}\nAnswer:"


def _arc_choices(obj: dict[str, Any], where: str) -> tuple[str, list[tuple[str, str]]]:
    question = obj.get("question")
    if isinstance(question, dict):  # original ARC: {"question": {"stem", "choices": [...]}}
        stem = _text(question, "stem", f"{where}: key 'question'", 'ARC question needs "stem"')
        raw = question.get("choices")
        if not isinstance(raw, list) or not raw:
            raise DatasetError(f"{where}: key 'question.choices' must be a non-empty list")
        pairs = []
        for i, c in enumerate(raw):
            if not isinstance(c, dict) or "text" not in c or "label" not in c:
                raise DatasetError(
                    f"{where}: key 'question.choices[{i}]' needs \"label\" and \"text\""
                )
            pairs.append((str(c["label"]), str(c["text"])))
        return stem, pairs
    stem = _text(obj, "question", where, 'arc-easy line needs "question"')
    choices = obj.get("choices")
    if not isinstance(choices, dict):
        raise DatasetError(
            f"{where}: key 'choices' must be an object {{\"text\": [...], \"label\": [...]}}"
        )
    texts, labels = choices.get("text"), choices.get("label")
    if not isinstance(texts, list) or not isinstance(labels, list) or len(texts) != len(labels):
        raise DatasetError(
            f"{where}: key 'choices' needs lists 'text' and 'label' of the same length"
        )
    return stem, [(str(lab), str(t)) for lab, t in zip(labels, texts, strict=True)]


def _arc(obj: dict[str, Any], where: str) -> str:
    stem, pairs = _arc_choices(obj, where)
    lines = [f"Question: {stem.strip()}"] + [f"{lab}. {t}" for lab, t in pairs]
    return "\n".join(lines) + "\nAnswer:"


def _spec_bench(obj: dict[str, Any], where: str) -> str:
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
        raise DatasetError(
            f"{where}: key 'turns' must be a non-empty list of strings (Spec-Bench question "
            "file)"
        )
    return turns[0]


def _speed_bench(obj: dict[str, Any], where: str) -> str:
    path, _, lineno = where.rpartition(":")
    return parse_row(obj, Path(path), int(lineno)).prompt


def _custom(obj: dict[str, Any], where: str) -> str:
    return _text(obj, "prompt", where, 'custom line needs "prompt"')


_PARSERS: dict[str, Callable[[dict[str, Any], str], str]] = {
    "gsm8k": _gsm8k,
    "arc-easy": _arc,
    "spec_bench": _spec_bench,
    "speed-bench": _speed_bench,
    "custom": _custom,
}


def _line_output_tokens(obj: dict[str, Any], where: str, default: int) -> int:
    value = obj.get("output_tokens")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DatasetError(f"{where}: key 'output_tokens' must be an integer >= 1, got {value!r}")
    return value


_WORD_TEXT = (
    "the of and to in is for on that with as by at from it this be are or an was which not "
    "have but all can more one will their has when there were what so if each about out up "
    "them time some these would into other two make like then its over such only new first "
    "number way could people after most also made any through work where many system data"
)
_WORDS = tuple(_WORD_TEXT.split())


def random_prompts(num: int, input_len: int, output_tokens: int, seed: int) -> list[
    BenchRequest
]:
    """``num`` prompts of ``input_len`` pseudo-words (about one token each), seeded."""
    if input_len < 1:
        raise DatasetError(f"--random-input-len must be >= 1, got {input_len}")
    rng = random.Random(seed)
    return [
        BenchRequest(
            prompt=f"{i}: " + " ".join(rng.choice(_WORDS) for _ in range(input_len)),
            output_tokens=output_tokens,
        )
        for i in range(num)
    ]


def load_requests(
    dataset: str,
    path: str | Path | None,
    *,
    num_prompts: int,
    output_tokens: int,
    seed: int = 0,
    input_len: int = 128,
    shuffle: bool = False,
) -> list[BenchRequest]:
    """The first ``num_prompts`` requests of a dataset (cycled if the file is shorter).

    ``output_tokens`` applies to every request except custom lines that give their own.
    ``shuffle`` draws the prompts in a seeded random order instead of file order.
    """
    if dataset not in DATASETS:
        raise DatasetError(f"unknown dataset {dataset!r} (one of: {', '.join(DATASETS)})")
    if num_prompts < 1:
        raise DatasetError(f"--num-prompts must be >= 1, got {num_prompts}")
    if output_tokens < 1:
        raise DatasetError(f"--output-len must be >= 1, got {output_tokens}")
    if dataset == "random":
        return random_prompts(num_prompts, input_len, output_tokens, seed)
    if path is None:
        raise DatasetError(
            f"dataset {dataset!r} needs --dataset-path FILE.jsonl (a local file; nothing is "
            "downloaded)"
        )
    p = Path(path)
    parse = _PARSERS[dataset]
    pool: list[BenchRequest] = []
    for lineno, obj in iter_jsonl(p):
        where = f"{p}:{lineno}"
        prompt = parse(obj, where)
        out = _line_output_tokens(obj, where, output_tokens) if dataset == "custom" else (
            output_tokens
        )
        pool.append(BenchRequest(prompt=prompt, output_tokens=out))
        if not shuffle and len(pool) >= num_prompts:
            break
    if not pool:
        raise DatasetError(f"{p}: no prompts (the file has no non-blank lines)")
    if shuffle:
        random.Random(seed).shuffle(pool)
    return [pool[i % len(pool)] for i in range(num_prompts)]


def write_custom_jsonl(requests: list[BenchRequest], path: Path) -> None:
    """Materialise prompts as a ``custom`` JSONL file (what ``vllm bench serve`` reads)."""
    with path.open("w", encoding="utf-8") as fh:
        for r in requests:
            fh.write(json.dumps({"prompt": r.prompt, "output_tokens": r.output_tokens}) + "\n")


__all__ = [
    "DATASETS",
    "FILE_DATASETS",
    "BenchRequest",
    "DatasetError",
    "iter_jsonl",
    "load_requests",
    "random_prompts",
    "write_custom_jsonl",
]
