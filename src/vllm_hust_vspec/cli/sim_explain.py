"""``vllm-hust-vspec-sim explain-npu``: ablations and sensitivity runs on the NPU calibration.

On the calibration record (default: the shipped ``sim/data/npu_calibration.json``; ``--refit``
fits it again) and the measured runs it was fitted on::

    vllm-hust-vspec-sim explain-npu                  # ablations and the tail share (~1 min)
    vllm-hust-vspec-sim explain-npu --sensitivity    # + a refit per unpinned parameter
    vllm-hust-vspec-sim explain-npu --json OUT.json  # every figure as JSON

The ablations simulate the draft model's online and fixed-gamma configurations with one
mechanism changed at a time; the sensitivity rows refit the step cost with one parameter the
data cannot pin changed and give each configuration's fitted / measured throughput, the
online / fixed-3 ratio and the steady gamma-2 / gamma-0 goodput at batch 128.
docs/simulator.md, "Inputs, fit and leave-one-out" and "What the data cannot pin".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..sim._strict import ScenarioError
from ..sim.calibration.explain import explain_doc
from ..sim.calibration.fit import calibrate
from ..sim.calibration.measurements import load_measurements
from ..sim.calibration.scenarios import load_record


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the subcommand."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-sim explain-npu",
        description="Ablations and sensitivity runs on the NPU calibration. docs/simulator.md.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--record", type=Path, default=None, metavar="npu_calibration.json",
                   help="calibration record (default: the shipped one)")
    p.add_argument("--refit", action="store_true",
                   help="fit the calibration on the measured runs instead (~50 s)")
    p.add_argument("--sensitivity", action="store_true",
                   help="also refit the step cost with each unpinned parameter changed")
    p.add_argument("--json", type=Path, default=None, metavar="OUT.json",
                   help="also write every figure as JSON")
    return p


def _print(doc: dict[str, Any]) -> None:
    print(f"{'draft model, one mechanism at a time':68s} {'tok/s':>8s} {'/fixed 3':>9s}")
    for row in doc["ablations"]:
        print(f"{row['label']:68s} {row['tok_s']:8.1f} {row['over_fixed_3']:9.3f}")
    print(f"share of the online run's simulated time at batch <= 64: {doc['tail_share']:.1%}")
    if "sensitivity" not in doc:
        return
    measured = doc["measured"]
    names = list(measured)
    print("\nfitted / measured throughput per assumption; online / fixed 3; "
          "steady gamma 2 / gamma 0 at batch 128")
    for row in doc["sensitivity"]:
        fitted = row["fitted"]
        ratios = " ".join(f"{fitted[n] / measured[n]:.3f}" for n in names)
        print(f"{row['assumption']}\n    {ratios}  online/fixed3 {row['online_over_fixed_3']:.3f}"
              f"  g2/g0 {row['b128_g2_over_g0']:.3f}")
    print("    (columns: " + ", ".join(names) + ")")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        data = load_measurements()
        cal = calibrate(data) if args.refit else load_record(args.record)
        doc = explain_doc(cal, data, with_sensitivity=args.sensitivity)
    except (ScenarioError, ValueError, KeyError, OSError) as exc:
        print(f"vllm-hust-vspec-sim explain-npu: error: {exc}", file=sys.stderr)
        return 2
    _print(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0
