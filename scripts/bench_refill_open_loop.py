#!/usr/bin/env python3
"""Refill under open-loop load: target-only vs vSpec with each refill rule, side by side.

For each request rate and refill variant, one ``vllm-hust-vspec-bench pair`` (counterbalanced
repetitions, each arm its own server) on the cpu-tiny preset with the random dataset, then one
table: the median throughput ratio vSpec / target-only with its per-repetition range, the p99
TTFT and TPOT ratios over every request of all repetitions, and the refill holds vSpec made.

Variants: ``off`` (no refill), ``hold-4`` / ``hold-8`` (hold whenever speculating, refill 4 or
8: vllm-hust-vSpec 0.14's rule) and ``auto`` (the default: hold while the measured fixed cost of
admitting steps pays for it).

    .venv/bin/python scripts/bench_refill_open_loop.py                    # rates 4 and 16
    .venv/bin/python scripts/bench_refill_open_loop.py --rates 16 --variants auto \\
        --repetitions 6                                                   # the gamma-0 check
    .venv/bin/python scripts/bench_refill_open_loop.py --pair pays --rates 4  # it pays

``--pair`` picks the bundled pair: ``no-pay`` (the preset's target + draft, where speculation
does not pay; the default) or ``pays`` (target-deep + draft-cheap-agree, where it does).

Needs an otherwise idle machine: both arms share its cores with the benchmark client.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from vllm_hust_vspec.bench.serve_pair import PAIRS

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "off": ["--adaptive-refill-batch", "1"],
    "hold-4": ["--adaptive-refill-batch", "4", "--adaptive-refill-hold", "speculating"],
    "hold-8": ["--adaptive-refill-batch", "8", "--adaptive-refill-hold", "speculating"],
    "auto": [],
}


def run_pair(rate: float, variant: str, reps: int, out: Path, args: argparse.Namespace
             ) -> dict[str, object]:
    """One bench pair; returns its pair-summary.json."""
    result = out / f"{args.pair}-rate{rate:g}-{variant}"
    cmd = [str(ROOT / ".venv" / "bin" / "vllm-hust-vspec-bench"), "pair",
           "--protocol", "cpu-tiny", "--dataset", "random", "--num-prompts",
           str(args.num_prompts), "--request-rate", f"{rate:g}", "--output-len",
           str(args.output_len), "--repetitions", str(reps), "--result-dir", str(result),
           "--quiet", *PAIR_FLAGS[args.pair], *VARIANTS[variant]]
    print(f"# {' '.join(cmd[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    summary = result / "pair-summary.json"
    if not summary.is_file():
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise SystemExit(f"bench pair failed ({variant}, rate {rate:g}): no {summary}")
    doc: dict[str, object] = json.loads(summary.read_text())
    doc["_elapsed_s"] = time.monotonic() - started
    runs = doc["runs"]
    assert isinstance(runs, dict)
    doc["_holds"] = round(sum(r.get("spec", {}).get("refill_holds", 0.0) for r in runs["vspec"]))
    return doc


PAIR_FLAGS = {p.key: p.flags for p in PAIRS}


def row(rate: float, variant: str, doc: dict[str, object]) -> str:
    """One table line."""
    cmp = doc["comparison"]
    assert isinstance(cmp, dict)
    per = cmp["speedup_per_repetition"]
    pooled = cmp["pooled_latency"]
    ttft = pooled["vspec"]["p99_ttft_ms"] / pooled["baseline"]["p99_ttft_ms"]
    tpot = pooled["vspec"]["p99_tpot_ms"] / pooled["baseline"]["p99_tpot_ms"]
    return (f"| {rate:g} | {variant} | {cmp['speedup']:.3f} | {min(per):.2f}-{max(per):.2f} | "
            f"{ttft:.2f} | {tpot:.2f} | {doc['_holds']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", choices=sorted(PAIR_FLAGS), default="no-pay",
                        help="the bundled pair (default: no-pay, the preset's target + draft)")
    parser.add_argument("--rates", default="4,16", help="request rates, comma separated")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"refill variants, comma separated ({', '.join(VARIANTS)})")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench-refill")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    lines = ["| rate (req/s) | refill | throughput vSpec / target | per repetition | "
             "p99 TTFT ratio | p99 TPOT ratio | holds |", "|---|---|---|---|---|---|---|"]
    for rate in rates:
        for variant in variants:
            doc = run_pair(rate, variant, args.repetitions, args.out, args)
            lines.append(row(rate, variant, doc))
            print(lines[-1], f"({doc['_elapsed_s']:.0f} s)", flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
