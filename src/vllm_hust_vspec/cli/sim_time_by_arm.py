"""``vllm-hust-vspec-sim time-by-arm``: a vSpec server's step time by gamma and drafter.

Reads the adaptive traces a server wrote (``--adaptive-trace``; ``vllm-hust-vspec-bench pair
--trace`` keeps one per vSpec run)::

    vllm-hust-vspec-sim time-by-arm RESULT_DIR/vspec-r*.trace.jsonl --after-idle 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..sim.time_by_arm import read_steps, report_line, summarize


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the subcommand."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-sim time-by-arm",
        description="For each adaptive trace: the steps and seconds at each verified gamma, "
        "with the drafter run or skipped, and what the steps off the sticky zero cost beyond "
        "the median steady skipped step.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("traces", nargs="+", type=Path, help="adaptive trace files (JSONL)")
    p.add_argument("--after-idle", type=float, default=None, metavar="S",
                   help="start each trace after its first gap of S seconds without steps "
                   "(bench pair: the warm-up requests, then the measured load)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Print one line per trace; returns the exit code."""
    args = build_parser().parse_args(argv)
    for path in args.traces:
        if not path.is_file():
            print(f"vllm-hust-vspec-sim time-by-arm: error: no trace file {path}",
                  file=sys.stderr)
            return 2
        print(report_line(path, summarize(read_steps(path, args.after_idle))))
    return 0
