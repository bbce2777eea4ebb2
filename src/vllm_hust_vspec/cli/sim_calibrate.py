"""``vllm-hust-vspec-sim calibrate-npu``: the NPU scenarios from measured runs, or a trace.

From the predecessor's measured Ascend runs (default: the copies shipped in ``sim/data``)::

    vllm-hust-vspec-sim calibrate-npu --out-dir npu-calibration

writes ``npu-b128-gsm8k-draft.json``, ``npu-b128-gsm8k-eagle.json``, a profile fitted to each
(``npu-b128-gsm8k-<method>.calibrated-profile.json``, for ``--adaptive-policy profile``) and the
calibration record ``npu_calibration.json``, and prints every configuration's measured and
fitted throughput. To refresh the shipped files, point ``--out-dir`` at
``src/vllm_hust_vspec/sim/scenarios_npu``, ``--profiles-dir`` at ``profiles`` and ``--record`` at
``src/vllm_hust_vspec/sim/data/npu_calibration.json``.

From a vSpec per-step trace (``--adaptive-trace PATH`` on an NPU host)::

    vllm-hust-vspec-sim calibrate-npu --trace vspec_trace.jsonl --method draft \\
        --write-scenario npu-draft-vspec.json

(capture sizes, refill and token budget from the trace's header; flags override them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..sim._strict import ScenarioError
from ..sim.calibration.fit import FitOptions, calibrate
from ..sim.calibration.measurements import load_measurements
from ..sim.calibration.scenarios import write_calibration
from ..sim.calibration.trace import scenario_from_npu_trace


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the subcommand."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-sim calibrate-npu",
        description="Calibrate the NPU simulator scenarios on measured runs (the "
        "predecessor's Ascend benchmarks) or on a vSpec per-step trace. docs/simulator.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    src = p.add_argument_group("measured runs (default inputs: the copies in sim/data)")
    src.add_argument("--runs", type=Path, metavar="runs.jsonl")
    src.add_argument("--bucket-rewards", type=Path, metavar="bucket_rewards.jsonl")
    src.add_argument("--hosts", type=Path, metavar="hosts.json",
                     help="host facts per configuration (refill, capture sizes, ...)")
    src.add_argument("--lengths", type=Path, metavar="LENGTHS.json",
                     help="per-request prompt/output lengths (also the --trace workload)")
    src.add_argument("--out-dir", type=Path, default=Path("npu-calibration"),
                     help="where the two scenarios go (default ./npu-calibration)")
    src.add_argument("--profiles-dir", type=Path, default=None,
                     help="where the fitted profiles go (default OUT_DIR)")
    src.add_argument("--record", type=Path, default=None,
                     help="calibration record path (default OUT_DIR/npu_calibration.json)")
    src.add_argument("--prefill-per-token-ms", type=float, default=0.0,
                     help="prefill cost per prompt token, not fitted (default 0)")
    tr = p.add_argument_group("a vSpec trace instead")
    tr.add_argument("--trace", type=Path, metavar="TRACE.jsonl",
                    help="fit the step cost and acceptance of one run of a vSpec trace")
    tr.add_argument("--trace-run", default=None, metavar="N|ID|last",
                    help="which run of the trace (default: the only one; 'last' for the last)")
    tr.add_argument("--method", choices=("draft", "eagle"), default="draft",
                    help="which output lengths of the lengths file to use (default draft)")
    tr.add_argument("--capture-sizes", default=None,
                    help="the host's graph capture sizes in tokens, comma separated "
                         "(default: the trace header's)")
    tr.add_argument("--native-gammas", default="",
                    help="gammas whose admission steps keep the drafter's graphs (empty: all)")
    tr.add_argument("--refill", type=int, default=None,
                    help="refill batch of the host (default: the trace header's, else 1)")
    tr.add_argument("--max-num-batched-tokens", type=int, default=None,
                    help="token budget (default: the trace header's, else 33280)")
    tr.add_argument("--write-scenario", type=Path, metavar="OUT.json",
                    help="with --trace: where the scenario goes (default: stdout)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def _from_trace(args: argparse.Namespace) -> int:
    data = load_measurements(lengths=args.lengths)
    outputs = data.get("target-only").output_lengths
    doc, fit = scenario_from_npu_trace(
        args.trace, run=args.trace_run, prompt_lengths=data.prompt_lengths,
        output_lengths=outputs,
        capture_sizes=None if args.capture_sizes is None else _ints(args.capture_sizes),
        native_gammas=_ints(args.native_gammas), refill=args.refill,
        max_num_batched_tokens=args.max_num_batched_tokens,
        name=f"npu-b128-gsm8k-{args.method}-vspec")
    text = json.dumps(doc, indent=1) + "\n"
    if args.write_scenario:
        args.write_scenario.write_text(text, encoding="utf-8")
        print(f"{fit.steps} steps fitted, step-time RMS error {fit.rms_relative_error:.1%}; "
              f"scenario written to {args.write_scenario}")
    else:
        print(text, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.trace:
            return _from_trace(args)
        data = load_measurements(args.runs, args.bucket_rewards, args.hosts, args.lengths)
        cal = calibrate(data, opts=FitOptions(prefill_per_token_ms=args.prefill_per_token_ms))
        record = args.record or args.out_dir / "npu_calibration.json"
        written, fitted = write_calibration(cal, data, args.out_dir, record,
                                            args.profiles_dir)
    except (ScenarioError, ValueError, KeyError, OSError) as exc:
        print(f"vllm-hust-vspec-sim calibrate-npu: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"written": [str(p) for p in written],
                          "fitted": [{"config": f.config, "measured": f.measured,
                                      "predicted": f.predicted, "ratio": f.ratio}
                                     for f in fitted]}, indent=2))
        return 0
    print(f"{'configuration':16s} {'measured':>10s} {'fitted':>10s} {'ratio':>7s}")
    for f in fitted:
        print(f"{f.config:16s} {f.measured:10.1f} {f.predicted:10.1f} {f.ratio:7.3f}")
    for path in written:
        print(f"written {path}")
    return 0
