"""``vllm-hust-vspec-sim robust``: gamma controllers over every host shape the NPU data allows.

The scenarios (``sim/calibration/family.py``):

  npu-<method>-t<t>   the calibrated B128 GSM8K hosts (draft model, EAGLE) with step costs
                      interpolated between the shipped fit (t = 0) and the alternative reading
                      of the data (t = 1: target-only admissions priced like EAGLE's), t = 0,
                      0.25, 0.5, 0.75, 1; acceptance as calibrated
  pg-<shape>          hypothetical partial-graph hosts built from the calibrated draft host:
                      graphs for some draft widths only, a decode step at another width runs
                      eager and pays more (cpu-like B8, cuda-like B32 and B64, npu-like B128)
  unseen<S>-...       with --unseen N: N more drawn the same way from seed S (random t in
                      -0.1..1.1, batch, graph widths, eager costs), never tuned on

Each scenario runs every fixed gamma, the oracle (greedy expected goodput with the true
acceptance) and each --policies entry on the same seeds. The table gives the best fixed gamma
in hindsight, the oracle, and per policy its goodput (tok/s), its ratio to max(best fixed,
oracle) and its mean gamma; then each policy's worst ratio and how many scenarios fall below
0.97. The exit code is 0 whatever the ratios (a report; the bar is a test's job).

  vllm-hust-vspec-sim robust                          # family + partial graphs, 3 seeds (~1 min)
  vllm-hust-vspec-sim robust --unseen 20 --json r.json
  vllm-hust-vspec-sim robust --quick --scenario 'pg-*' --policies online,online-ucb1
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

from ..sim._strict import ScenarioError
from ..sim.calibration.family import Member, family, unseen
from ..sim.calibration.robust import (
    BAR,
    QUICK_REQUESTS,
    format_report,
    quick_doc,
    run_robust,
)
from ..sim.calibration.scenarios import load_npu_scenario
from ..sim.policies import PolicyError, known_policy_help, make_controller

PROG = "vllm-hust-vspec-sim robust"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the subcommand."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Robustness of gamma controllers over the NPU calibration family and "
        "hypothetical partial-graph hosts: every fixed gamma, the oracle and each policy on "
        "the same seeds; ratio = policy / max(best fixed, oracle).",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="seeds per run (1, 2, ..., N; default 3, with --quick 1)")
    p.add_argument("--unseen", type=int, default=0, metavar="N",
                   help="add N generated scenarios the family has not seen (default 0)")
    p.add_argument("--unseen-seed", type=int, default=0, metavar="S",
                   help="the seed the --unseen scenarios are drawn from (default 0)")
    p.add_argument("--policies", action="append", default=None, metavar="A,B",
                   help="policies under test, comma-separated or repeated (default: online; "
                   f"known: {known_policy_help()})")
    p.add_argument("--scenario", action="append", default=None, metavar="GLOB",
                   help="run only the scenarios whose name matches, repeatable "
                   "(e.g. 'npu-draft-*', 'pg-cpu-like-b8')")
    p.add_argument("--quick", action="store_true",
                   help=f"a fast check: the first {QUICK_REQUESTS} requests of each workload "
                   "and one seed (unless --seeds)")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="worker processes (default 2)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT.json",
                   help="also write every result (per seed) and the summary as JSON")
    p.add_argument("--list", action="store_true",
                   help="list the scenarios that would run, with their kind, and exit")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _progress(line: str) -> None:
    print(f"[robust] {line}", file=sys.stderr, flush=True)


def _members(args: argparse.Namespace) -> list[Member]:
    members = [*family(), *unseen(args.unseen_seed, args.unseen)]
    if args.scenario:
        members = [m for m in members
                   if any(fnmatch.fnmatchcase(m.name, pat) for pat in args.scenario)]
    if args.quick:
        members = [Member(m.name, m.kind, quick_doc(m.doc)) for m in members]
    return members


def main(argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit code (0 whatever the ratios)."""
    args = build_parser().parse_args(argv)
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    if seeds < 1:
        return _fail("--seeds must be >= 1")
    if args.unseen < 0:
        return _fail("--unseen must be >= 0")
    if args.jobs < 1:
        return _fail("--jobs must be >= 1")
    policies = [p.strip() for arg in (args.policies or ["online"]) for p in arg.split(",")
                if p.strip()]
    if not policies:
        return _fail("--policies names no policy")
    try:
        probe = load_npu_scenario("draft")
        for name in policies:
            make_controller(name, probe)  # a bad name fails now, not in a worker
        members = _members(args)
        if not members:
            return _fail(f"no scenario matches {' '.join(args.scenario or [])}")
        if args.list:
            for m in members:
                print(f"{m.name:40s} {m.kind:14s} {m.doc['description']}")
            return 0
        _progress(f"{len(members)} scenarios, seeds 1..{seeds}, policies "
                  f"{', '.join(policies)}, {args.jobs} worker(s)"
                  + (", quick" if args.quick else ""))
        report = run_robust(members, policies, list(range(1, seeds + 1)), jobs=args.jobs,
                            progress=_progress)
    except (ScenarioError, PolicyError, ValueError, OSError) as exc:
        return _fail(str(exc))
    report.quick = args.quick
    print(format_report(report, BAR))
    if args.json:
        doc = report.as_dict()
        doc["argv"] = list(sys.argv[1:] if argv is None else argv)
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        _progress(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
