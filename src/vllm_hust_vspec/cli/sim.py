"""``vllm-hust-vspec-sim``: compare gamma policies in the offline simulator."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..sim._strict import ScenarioError
from ..sim.cost import describe_cost
from ..sim.policies import PolicyError, all_policies, known_policy_help, make_controller
from ..sim.replay import read_trace_runs, scenario_dict_from_run, select_trace_run, write_trace
from ..sim.runner import ScenarioReport, evaluate
from ..sim.scenario import (
    Scenario,
    list_calibrated_scenarios,
    list_scenarios,
    list_slo_scenarios,
    load_scenario,
    parse_scenario,
)

EPILOG = """\
examples:
  vllm-hust-vspec-sim --list-scenarios
  vllm-hust-vspec-sim --scenario b64-eagle1-h100 --all --seeds 3
  vllm-hust-vspec-sim --scenario my.json --policy online --policy fixed:3 --json
  vllm-hust-vspec-sim --trace vspec_trace.jsonl --all --write-scenario fitted.json
  vllm-hust-vspec-sim --trace vspec_trace.jsonl --trace-run 2 --policy online
  vllm-hust-vspec-sim calibrate-npu --out-dir npu-calibration    (see calibrate-npu --help)
  vllm-hust-vspec-sim explain-npu --sensitivity                  (see explain-npu --help)
  vllm-hust-vspec-sim robust --unseen 20                         (see robust --help)
  vllm-hust-vspec-sim time-by-arm vspec.trace.jsonl --after-idle 2  (see time-by-arm --help)
  vllm-hust-vspec-sim lockstep-dp --cost mtp-head                (see lockstep-dp --help)

Policies: fixed:K (every K in min_gamma..max_gamma), online and profile (vSpec's
controllers), oracle (knows the true acceptance), and the published baselines
vllm-batch-schedule, sglang-adaptive, hf-heuristic, ucb1, vllm-acceptance-adaptive-k,
vllm-dflash-adaptive-k, sglang-per-batch-ema, nightjar-bandit; by name, SpecRhythm's per-request
TPOT-SLO budgets (spec-rhythm, spec-rhythm-roofline). Goodput is committed tokens per busy
second; on scenarios whose requests carry TPOT SLOs, "slo %" is the share of requests whose
mean TPOT met their SLO. Scenario schema and trace format: docs/simulator.md.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept separate so --help is testable)."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-sim",
        description="Discrete-step simulator of continuous-batching speculative decoding: "
        "runs gamma policies on a scenario with common random numbers and reports goodput.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_argument_group("what to simulate")
    src.add_argument("--scenario", metavar="FILE_OR_NAME",
                     help="a shipped scenario name (see --list-scenarios) or a JSON file")
    src.add_argument("--trace", metavar="FILE.jsonl",
                     help="replay a trace recorded by the plugin: fit acceptance and cost "
                     "from it and simulate that workload")
    src.add_argument("--trace-run", default=None, metavar="N|ID|last",
                     help="with --trace: which run to replay when the file holds several "
                     "(the plugin appends one per server start): a 1-based index, a run id "
                     "or a unique prefix of one, or last (default: the last run with steps)")
    src.add_argument("--trace-phases", type=int, default=1, metavar="N",
                     help="with --trace: cut the trace into N time slices with their own "
                     "acceptance (non-stationary replay; default 1)")
    src.add_argument("--output-len", type=int, default=256, metavar="TOKENS",
                     help="with --trace: output length of replayed requests (default 256)")
    src.add_argument("--prompt-len", type=int, default=256, metavar="TOKENS",
                     help="with --trace: prompt length of replayed requests (default 256)")
    src.add_argument("--write-scenario", metavar="OUT.json",
                     help="with --trace: also write the fitted scenario so it can be edited")
    src.add_argument("--list-scenarios", action="store_true",
                     help="list the shipped scenarios and exit")
    pol = p.add_argument_group("policies and runs")
    pol.add_argument("--policy", action="append", default=[], metavar="NAME",
                     help=f"policy to run, repeatable ({known_policy_help()})")
    pol.add_argument("--all", action="store_true",
                     help="run every policy (the default when no --policy is given)")
    pol.add_argument("--seeds", type=int, default=3, metavar="N",
                     help="seeds per policy (scenario seed, seed+1, ...; default 3)")
    pol.add_argument("--jobs", type=int, default=1, metavar="N",
                     help="worker processes (default 1)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true",
                     help="print one JSON document: scenario fields and one object per policy")
    out.add_argument("--plot", metavar="OUT.png",
                     help="draw gamma over time and goodput per policy (needs matplotlib)")
    out.add_argument("--record-trace", metavar="OUT.jsonl",
                     help="write the first policy's first-seed run as a plugin-format trace")
    return p


def _warn(message: str) -> None:
    print(f"vllm-hust-vspec-sim: warning: {message}", file=sys.stderr)


def _fail(message: str) -> int:
    print(f"vllm-hust-vspec-sim: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "calibrate-npu":
        from .sim_calibrate import main as calibrate_main  # noqa: PLC0415

        return calibrate_main(argv[1:])
    if argv and argv[0] == "explain-npu":
        from .sim_explain import main as explain_main  # noqa: PLC0415

        return explain_main(argv[1:])
    if argv and argv[0] == "robust":
        from .sim_robust import main as robust_main  # noqa: PLC0415

        return robust_main(argv[1:])
    if argv and argv[0] == "lockstep-dp":
        from .sim_lockstep_dp import main as lockstep_dp_main  # noqa: PLC0415

        return lockstep_dp_main(argv[1:])
    if argv and argv[0] == "time-by-arm":
        from .sim_time_by_arm import main as time_by_arm_main  # noqa: PLC0415

        return time_by_arm_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list_scenarios:
        for name in list_scenarios():
            sc = load_scenario(name)
            kind = "stationary" if sc.stationary else "non-stationary"
            print(f"{name:30s} {kind:15s} {sc.description}")
        for name in list_calibrated_scenarios():
            print(f"{name:30s} {'calibrated':15s} {load_scenario(name).description}")
        for name in list_slo_scenarios():
            print(f"{name:30s} {'tpot-slo':15s} {load_scenario(name).description}")
        return 0
    if bool(args.scenario) == bool(args.trace):
        return _fail("give exactly one of --scenario FILE_OR_NAME or --trace FILE.jsonl "
                     "(or --list-scenarios)")
    if args.seeds < 1:
        return _fail("--seeds must be >= 1")
    if args.jobs < 1:
        return _fail("--jobs must be >= 1")
    try:
        scenario = _load(args)
        policies = list(args.policy)
        if args.all or not policies:
            policies = list(dict.fromkeys([*all_policies(scenario), *policies]))
        for name in policies:
            make_controller(name, scenario)  # validate names before spending time
        report = evaluate(scenario, policies, args.seeds, jobs=args.jobs,
                          record=bool(args.plot))
    except (ScenarioError, PolicyError) as exc:
        return _fail(str(exc))
    if args.record_trace:
        from ..sim.engine import simulate  # noqa: PLC0415

        run = simulate(scenario, make_controller(policies[0], scenario), scenario.seed,
                       policy=policies[0], trace=True)
        write_trace(args.record_trace, run.trace)
    if args.json:
        print(json.dumps(_json_doc(scenario, report), indent=2))
    else:
        _print_table(scenario, report)
    if args.plot:
        from ..sim.plot import PlotUnavailable, plot_report  # noqa: PLC0415

        try:
            plot_report(report, args.plot)
        except PlotUnavailable as exc:
            return _fail(str(exc))
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


def _load(args: argparse.Namespace) -> Scenario:
    if args.scenario:
        return load_scenario(args.scenario)
    if args.trace_phases < 1:
        raise ScenarioError("--trace-phases must be >= 1")
    runs = read_trace_runs(args.trace, warn=_warn)
    selector = args.trace_run or "last"
    try:
        chosen = select_trace_run(runs, selector, source=args.trace)
    except ScenarioError as exc:
        raise ScenarioError(f"--trace-run {selector}: {exc}") from None
    if len(runs) > 1:
        print(f"vllm-hust-vspec-sim: trace {args.trace} holds {len(runs)} runs; replaying "
              f"{chosen.describe()} (choose with --trace-run N|ID|last)", file=sys.stderr)
        for r in runs:
            print(f"  {r.describe()}", file=sys.stderr)
    data = scenario_dict_from_run(chosen, args.trace, output_len=args.output_len,
                                  prompt_len=args.prompt_len, phases=args.trace_phases)
    if args.write_scenario:
        Path(args.write_scenario).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return parse_scenario(data, f"replay of {args.trace}")


def _json_doc(scenario: Scenario, report: ScenarioReport) -> dict[str, object]:
    doc = report.as_dict()
    doc["tags"] = list(scenario.tags)
    doc["min_gamma"] = scenario.min_gamma
    doc["max_gamma"] = scenario.max_gamma
    for pol in doc["policies"]:  # type: ignore[attr-defined]
        pol["scenario"] = report.scenario
        pol["best_fixed_policy"] = report.best_fixed_policy
    return doc


def _fmt_ratio(x: float) -> str:
    return f"{x:6.3f}" if math.isfinite(x) else "     -"


def _print_table(scenario: Scenario, report: ScenarioReport) -> None:
    kind = "stationary" if scenario.stationary else "non-stationary"
    print(f"scenario {scenario.name} ({kind}; gamma {scenario.min_gamma}..{scenario.max_gamma};"
          f" cost {describe_cost(scenario.cost)}); seeds {report.seeds}")
    print(f"best fixed gamma in hindsight: {report.best_fixed_policy}")
    # SLO columns only for workloads whose requests carry TPOT SLOs
    classes = sorted({c for s in report.policies for c in s.slo_by_class})
    head = (f"{'policy':22s} {'goodput tok/s':>16s} {'xbest':>6s} {'xoracle':>7s} "
            f"{'gamma':>5s} {'accept':>6s} {'tpot ms':>7s} {'sim s':>7s}")
    if classes:
        head += f" {'slo %':>6s}" + "".join(f" {c[:10]:>10s}" for c in classes)
    print(head)
    print("-" * len(head))
    for s in report.policies:
        gp = f"{s.goodput_mean:9.1f}+-{s.goodput_std:<5.0f}"
        row = (f"{s.policy:22s} {gp:>16s} {_fmt_ratio(s.ratio_to_best_fixed)} "
               f"{_fmt_ratio(s.ratio_to_oracle):>7s} {s.mean_gamma:5.2f} "
               f"{s.acceptance_rate:6.3f} {s.mean_tpot_ms:7.2f} {s.sim_seconds:7.1f}")
        if classes:
            row += f" {_fmt_pct(s.slo_attainment):>6s}" + "".join(
                f" {_fmt_pct(s.slo_by_class.get(c, math.nan)):>10s}" for c in classes)
        print(row)
    if classes:
        print("slo %: requests whose mean TPOT (first token to finish) met their SLO, "
              "all seeds pooled; then per class")


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}" if math.isfinite(x) else "-"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
