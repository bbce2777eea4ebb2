"""``vllm-hust-vspec-active-vocab``: build a draft active-vocabulary ids file from token
frequencies of a text corpus (tokenized with the target's tokenizer) or of recorded token ids.

The file lists token ids most frequent first (JSON ``{"ids": [...], ...}``); vSpec reads it
with ``--eagle-draft-active-vocab-file`` and keeps the first ``--eagle-draft-active-vocab-size``
ids (all when unset).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

_EPILOG = """\
trace files: JSON Lines or a JSON list; every object contributes its "token_ids",
"output_token_ids" and "prompt_token_ids" lists (a bare list of ints counts as token ids).
The target-argmax trace of --eagle-target-argmax-trace-path (docs/diagnostics.md) is read as
such: its run header and closing lines are skipped, each step's "token_ids" (one list per
request in "req_ids") are counted.

exit status: 0 written, 1 inputs could not be read, 2 bad arguments.
"""

TRACE_KEYS = ("token_ids", "output_token_ids", "prompt_token_ids")
# host/worker/v1/diagnostics.py writes it; a test keeps the two in sync
ARGMAX_FORMAT = "vspec_target_argmax"
ARGMAX_VERSIONS = (1,)


def rank_ids(counts: Counter[int], size: int | None, always: Iterable[int] = ()) -> list[int]:
    """Ids by descending count (ties: lower id first), ``always`` ids first, cut to ``size``."""
    head = list(dict.fromkeys(int(t) for t in always))
    seen = set(head)
    rest = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if t not in seen]
    ids = head + rest
    return ids if size is None else ids[:size]


def coverage(counts: Counter[int], ids: Sequence[int]) -> float:
    """Fraction of counted tokens whose id is in ``ids``."""
    total = sum(counts.values())
    if not total:
        return 0.0
    keep = set(ids)
    return sum(c for t, c in counts.items() if t in keep) / total


def _ids_in(obj: Any) -> Iterable[int]:
    if isinstance(obj, list):
        if all(isinstance(x, int) for x in obj):
            yield from obj
        else:
            for item in obj:
                yield from _ids_in(item)
    elif isinstance(obj, dict):
        for key in TRACE_KEYS:
            value = obj.get(key)
            if isinstance(value, list):
                yield from _ids_in(value)


def _argmax_ids(obj: Any, where: str) -> Iterable[int] | None:
    """The ids of one line of a target-argmax trace; None when the line is not of that format
    (then the generic keys apply). Headers and closing lines give no ids."""
    if not isinstance(obj, dict):
        return None
    if obj.get("trace") == ARGMAX_FORMAT:
        if obj.get("version") not in ARGMAX_VERSIONS:
            raise ValueError(f"{where}: {ARGMAX_FORMAT} version {obj.get('version')!r} is not "
                             f"supported (this tool reads {list(ARGMAX_VERSIONS)})")
        return ()
    if obj.get("end") is True and "token_ids" not in obj:
        return ()
    if "req_ids" in obj and "step" in obj:
        req_ids, tokens = obj["req_ids"], obj.get("token_ids")
        if not isinstance(tokens, list) or len(tokens) != len(req_ids) or not all(
            isinstance(row, list) and all(isinstance(t, int) for t in row) for row in tokens
        ):
            raise ValueError(f"{where}: an argmax step needs one token-id list per request id")
        return (t for row in tokens for t in row)
    return None


def count_trace(path: Path) -> Counter[int]:
    """Token-id counts of a recorded trace (JSON Lines or one JSON document), including the
    target-argmax trace the plugin writes (``--eagle-target-argmax-trace-path``)."""
    text = path.read_text()
    counts: Counter[int] = Counter()
    try:
        counts.update(_ids_in(json.loads(text)))
        return counts
    except ValueError:
        pass
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not JSON ({exc})") from exc
            ids = _argmax_ids(obj, f"{path}:{n}")
            counts.update(_ids_in(obj) if ids is None else ids)
    return counts


def count_corpus(paths: Sequence[Path], tokenizer: str) -> tuple[Counter[int], list[int]]:
    """Token-id counts of text files, and the tokenizer's special ids."""
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(tokenizer)
    tok.model_max_length = sys.maxsize  # whole files are counted, never fed to a model
    counts: Counter[int] = Counter()
    for p in paths:
        counts.update(tok.encode(p.read_text(errors="replace"), add_special_tokens=False))
    return counts, sorted(int(i) for i in tok.all_special_ids)


def build_parser() -> argparse.ArgumentParser:
    """Argument parser (exposed for docs and tests)."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-active-vocab", description=__doc__.splitlines()[0],
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--corpus", type=Path, nargs="*", default=[], metavar="TEXT",
                   help="text files to tokenize (needs --tokenizer)")
    p.add_argument("--tokenizer", help="tokenizer directory (the target model's)")
    p.add_argument("--trace", type=Path, nargs="*", default=[], metavar="JSON",
                   help="recorded token ids (JSON Lines / JSON)")
    p.add_argument("--size", type=int, default=None, help="keep this many ids (default: all seen)")
    p.add_argument("--always", type=int, nargs="*", default=[], metavar="ID",
                   help="ids always included first (the tokenizer's special ids are added)")
    p.add_argument("--out", type=Path, required=True, help="output ids file (JSON)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.corpus and not args.trace:
        parser.error("give --corpus TEXT... (with --tokenizer) and/or --trace JSON...")
    if args.corpus and not args.tokenizer:
        parser.error("--corpus needs --tokenizer (the target model's tokenizer directory)")
    if args.size is not None and args.size < 1:
        parser.error("--size must be >= 1")
    counts: Counter[int] = Counter()
    always = list(args.always)
    try:
        if args.corpus:
            c, special = count_corpus(args.corpus, args.tokenizer)
            counts.update(c)
            always += special
        for path in args.trace:
            counts.update(count_trace(path))
    except (OSError, ValueError) as exc:
        print(f"vllm-hust-vspec-active-vocab: {exc}", file=sys.stderr)
        return 1
    ids = rank_ids(counts, args.size, always)
    cov = coverage(counts, ids)
    args.out.write_text(json.dumps({
        "ids": ids, "size": len(ids), "coverage": round(cov, 6),
        "counted_tokens": sum(counts.values()), "distinct_tokens": len(counts),
    }) + "\n")
    print(f"wrote {len(ids)} ids to {args.out}: {cov:.1%} of {sum(counts.values())} counted "
          f"tokens ({len(counts)} distinct)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
