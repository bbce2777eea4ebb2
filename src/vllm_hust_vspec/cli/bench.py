"""``vllm-hust-vspec-bench``: throughput measurements, alone or as a target-only/vSpec pair.

Examples::

    vllm-hust-vspec-bench run --base-url http://127.0.0.1:8000 --dataset gsm8k \\
        --dataset-path gsm8k-test.jsonl
    vllm-hust-vspec-bench pair --protocol cpu-tiny --num-prompts 32 --output-len 64 \\
        --repetitions 3 --plot pair.png
    vllm-hust-vspec-bench pair --protocol eagle --dry-run
    vllm-hust-vspec-bench run --base-url http://127.0.0.1:8000 --dataset speed-bench \
        --dataset-path speed-bench-qualitative.jsonl --num-prompts 80   # per category
    vllm-hust-vspec-bench --method draft      # the ARC-Easy protocol bench (no subcommand)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from vllm_hust_vspec._version import __version__
from vllm_hust_vspec.bench.datasets import DATASETS, DatasetError
from vllm_hust_vspec.bench.report import ProgressLine, run_summary
from vllm_hust_vspec.bench.run import BACKENDS, BenchError, LoadConfig, Target, choose_backend
from vllm_hust_vspec.bench.speed_bench import SPLITS
from vllm_hust_vspec.bench.stats import LATENCY_METRICS
from vllm_hust_vspec.cli.launch import split_passthrough
from vllm_hust_vspec.cli.options import add_settings_arguments, cli_values

PROG = "vllm-hust-vspec-bench"
EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 1, 2, 3

EPILOG = """\
without a subcommand: the ARC-Easy protocol bench, 'vllm-hust-vspec-bench --method draft|eagle'
against a 'vllm-hust-vspec --protocol arc-easy' server (see its --method draft --help).

exit status: 0 done (pair: speedup >= --min-speedup and every latency gate met), 1 pair
below --min-speedup or above a --max-*-p99-ratio, 2 bad arguments or configuration, 3 a
server or the load failed.

Fair comparison (docs/benchmarks.md): temperature 0, no relaxed acceptance, same server flags,
warm-up before each measured run, repetitions interleaved, medians with their range.

SPEED-Bench (--dataset speed-bench): --num-prompts is per group; the groups (categories of
the qualitative split, length buckets of the throughput split) run one after another, each
its own /metrics window, and the report shows acceptance and throughput per group.
"""

PAIR_EPILOG = """
Forced acceptance length (measurement only): '--forced-acceptance-length N' makes the vSpec
arm keep exactly N drafts per greedy step whatever the target says. OUTPUTS CHANGE, so it is
refused unless --allow-changed-outputs is given too; the logs, pair-summary.json
("outputs_changed": true, "forced_acceptance_length": N) and pair-summary.md carry a banner.
"""


N = TypeVar("N", int, float)


def _bounded(
    cast: Callable[[str], N], low: float, *, above: bool = False, inf: bool = False
) -> Callable[[str], N]:
    """argparse type: ``cast(text)`` that is >= ``low`` (> with ``above``) and finite (or
    infinite with ``inf``). float() takes "nan", and nan fails every comparison silently."""
    bound = f"{'>' if above else '>='} {low:g}" + (" (or inf)" if inf else "")
    kind = "an integer" if cast is int else "a number"

    def parse(text: str) -> N:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} {bound}, got {text!r}") from None
        in_range = value > low if above else value >= low
        if not in_range or math.isnan(value) or (math.isinf(value) and not inf):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text!r}")
        return value

    return parse


_count = _bounded(int, 1)  # prompts, tokens, repetitions
_rate_value = _bounded(float, 0, above=True, inf=True)


def _rate(text: str) -> float:
    return float("inf") if text.lower() == "unlimited" else _rate_value(text)


def _add_load_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("load (same for every run)")
    g.add_argument("--dataset", choices=DATASETS, default="random",
                   help="prompt source (default random; gsm8k, arc-easy, spec_bench, "
                        "speed-bench and custom read --dataset-path)")
    g.add_argument("--dataset-path", metavar="FILE.jsonl", help="local JSONL file")
    g.add_argument("--speed-bench-split", choices=SPLITS, default=None,
                   help="speed-bench: group by category (qualitative) or by input-length "
                        "bucket (throughput); default: throughput when the rows' 'split' or "
                        "the file name names a throughput_<N>k config, else qualitative")
    g.add_argument("--num-prompts", type=_count, default=200,
                   help="measured requests (200; speed-bench: per group)")
    g.add_argument("--output-len", type=_count, default=256, help="output tokens per request (256)")
    g.add_argument("--random-input-len", dest="input_len", type=_count, default=128,
                   help="words per random prompt (128)")
    g.add_argument("--request-rate", type=_rate, default=float("inf"), metavar="R",
                   help="requests/s with Poisson arrivals, or inf (default: all at once)")
    g.add_argument("--max-concurrency", type=_count, default=None, metavar="N",
                   help="requests in flight at most (default unlimited)")
    g.add_argument("--temperature", type=_bounded(float, 0), default=0.0,
                   help="sampling temperature (0)")
    g.add_argument("--seed", type=int, default=0, help="seed for prompts and arrivals (0)")
    g.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                   help="generate exactly --output-len tokens (default on)")
    g.add_argument("--shuffle", action="store_true", help="seeded random prompt order")
    g.add_argument("--warmup-prompts", type=_bounded(int, 0), default=8,
                   help="unmeasured requests before each run (8)")
    g.add_argument("--warmup-output-len", type=_count, default=32,
                   help="output tokens of each warm-up request (32)")
    g.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="builtin client or 'vllm bench serve' (auto: vllm when importable and a "
                        "tokenizer is known, else builtin)")
    g.add_argument("--result-dir", type=Path, default=None,
                   help="where results go (default ./vspec-bench/<mode>-<time>)")
    g.add_argument("--quiet", action="store_true", help="no progress display")


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's parser (``run`` and ``pair`` subcommands)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Measure serving throughput; compare target-only with vSpec.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="mode", required=True, metavar="{run,pair}")
    run = sub.add_parser("run", help="one load against a running OpenAI-compatible server",
                         epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    run.add_argument("--model", help="served model name (default: the server's first model)")
    run.add_argument("--tokenizer", help="local tokenizer folder (needed by --backend vllm)")
    run.add_argument("--dry-run", action="store_true", help="print what would run, then exit")
    _add_load_arguments(run)
    pair = sub.add_parser(
        "pair", help="start a target-only and a vSpec server from one preset and compare",
        epilog=EPILOG + PAIR_EPILOG + "\nArguments after '--' go to both 'vllm serve' commands.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pair.add_argument("--protocol", "--preset", dest="protocol", metavar="NAME",
                      help="launcher preset (see vllm-hust-vspec --list-presets) or .toml")
    pair.add_argument("--config", metavar="FILE", help="TOML config over the preset")
    pair.add_argument("--repetitions", type=_count, default=3,
                      help="A B rounds, each arm measured once per round (3)")
    pair.add_argument("--min-speedup", type=_bounded(float, 0, above=True), default=1.10,
                      help="pass threshold on median vSpec / target-only throughput (1.10)")
    for metric in LATENCY_METRICS:
        pair.add_argument(f"--max-{metric}-p99-ratio", type=_bounded(float, 0, above=True),
                          default=None, metavar="R", dest=f"max_{metric}_p99_ratio",
                          help=f"fail unless vSpec's p99 {metric.upper()} (pooled over every "
                               f"request of its repetitions) <= R x target-only's (off)")
    pair.add_argument("--plot", metavar="OUT.png",
                      help="write a figure (needs matplotlib; implies --trace)")
    pair.add_argument("--trace", action="store_true",
                      help="keep each vSpec run's controller trace (vspec-rN.trace.jsonl; off "
                           "by default, as writing it costs the engine time target-only does "
                           "not pay)")
    pair.add_argument("--server-timeout", type=_bounded(float, 0, above=True), default=900.0,
                      metavar="S",
                      help="seconds a server may take to become ready (900)")
    pair.add_argument("--dry-run", action="store_true", help="print the commands, then exit")
    pair.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    pair.add_argument("--allow-changed-outputs", action="store_true",
                      help="accept --forced-acceptance-length N (MEASUREMENT ONLY: the vSpec "
                           "arm's outputs change; results are labelled outputs_changed)")
    _add_load_arguments(pair)
    add_settings_arguments(pair)
    return parser


def _load(ns: argparse.Namespace) -> LoadConfig:
    # Ranges are checked by the argparse types (_bounded).
    return LoadConfig(
        dataset=ns.dataset, dataset_path=ns.dataset_path, num_prompts=ns.num_prompts,
        output_len=ns.output_len, input_len=ns.input_len, request_rate=ns.request_rate,
        max_concurrency=ns.max_concurrency, temperature=ns.temperature, seed=ns.seed,
        ignore_eos=ns.ignore_eos, shuffle=ns.shuffle, warmup_prompts=ns.warmup_prompts,
        warmup_output_len=ns.warmup_output_len, speed_bench_split=ns.speed_bench_split,
    )


def _result_dir(ns: argparse.Namespace) -> Path:
    if ns.result_dir is not None:
        return Path(ns.result_dir)
    return Path("vspec-bench") / f"{ns.mode}-{time.strftime('%Y%m%d-%H%M%S')}"


def _err(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)


def _main_run(ns: argparse.Namespace, load: LoadConfig) -> int:
    from vllm_hust_vspec.bench.run import requests_for, run_once, vllm_command

    target = Target(ns.base_url, ns.model, ns.tokenizer)
    requests_for(load)  # dataset errors before anything is sent
    backend = choose_backend(ns.backend, target)
    out_dir = _result_dir(ns)
    if ns.dry_run:
        print(f"# load: {load.describe()}\n# target: {ns.base_url}; backend {backend}; "
              f"results in {out_dir}")
        if backend == "vllm":
            argv, _, _ = vllm_command(target, ns.model or "<first model>", load, out_dir, "run")
            print(" ".join(argv))
        return 0
    prog = ProgressLine(enabled=not ns.quiet)
    prog.start("run")
    if load.dataset == "speed-bench":
        from vllm_hust_vspec.bench.speed_report import group_table
        from vllm_hust_vspec.bench.speed_run import run_speed_bench

        out = run_speed_bench(target, load, backend=backend, workdir=out_dir, name="run",
                              progress=prog.requests, log=prog.message)
        summary = run_summary(out.result) + "\n\n" + group_table(out.result["speed_bench"])
    else:
        out = run_once(target, load, backend=backend, workdir=out_dir, name="run",
                       progress=prog.requests, log=prog.message)
        summary = run_summary(out.result)
    (out_dir / "summary.txt").write_text(summary + "\n", encoding="utf-8")
    print(summary)
    print(f"raw result: {out.path}")
    return 0


def _main_pair(ns: argparse.Namespace, load: LoadConfig, passthrough: list[str]) -> int:
    from vllm_hust_vspec.bench.pair import plan_pair, run_pair
    from vllm_hust_vspec.bench.run import requests_for
    from vllm_hust_vspec.launch.models import MODEL_DIR_ENV, with_checkout_model_dir
    from vllm_hust_vspec.settings import SettingsError, resolve_settings

    requests_for(load)  # dataset errors before any server starts
    resolved = resolve_settings(preset=ns.protocol, config=ns.config, cli=cli_values(ns),
                                env=os.environ)
    env, tiny = with_checkout_model_dir(os.environ)  # what ./run.sh would export
    if tiny is not None:
        print(f"{PROG}: note: {MODEL_DIR_ENV} is unset; looking up models in this checkout's "
              f"{tiny}, as ./run.sh does", file=sys.stderr)
    s = resolved.settings
    forced = s.forced_acceptance_length
    if forced is None and s.relaxed_acceptance():
        raise SettingsError("relaxed acceptance is on (confidence_accept_margin / "
                         "eagle_relaxed_accept_topk): outputs differ from target-only, so the "
                         "pair would not compare equal work; drop the option")
    if load.temperature != 0.0:
        print(f"{PROG}: note: temperature {load.temperature:g} is not the fair-comparison "
              "protocol (temperature 0)", file=sys.stderr)
    plan = plan_pair(resolved, env, passthrough, load=load,
                     repetitions=ns.repetitions, min_speedup=ns.min_speedup,
                     backend=ns.backend,
                     result_dir=_result_dir(ns), server_timeout_s=ns.server_timeout,
                     allow_changed_outputs=ns.allow_changed_outputs,
                     max_p99_ratios={m: r for m in LATENCY_METRICS
                                     if (r := getattr(ns, f"max_{m}_p99_ratio")) is not None},
                     trace=ns.trace or bool(ns.plot))
    if forced is not None:
        from vllm_hust_vspec.bench.speed_report import forced_banner

        # Always on stderr, even with --quiet: nobody should read these figures as a
        # quality-preserving comparison.
        print(f"{PROG}: {forced_banner(forced)}", file=sys.stderr)
    for note in plan.commands["vspec"].notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    if ns.dry_run:
        print(json.dumps(plan.to_dict(), indent=2) if ns.json else plan.describe())
        return 0
    if ns.json:
        _err("--json needs --dry-run")
        return EXIT_USAGE
    result = run_pair(plan, ProgressLine(enabled=not ns.quiet))
    assert result.comparison is not None
    print(f"load per run: {load.describe()}")
    print(result.markdown())
    print(f"results: {plan.result_dir} (pair-summary.json, pair-summary.md, per-run JSON, "
          f"server logs{', traces' if plan.trace else ''})")
    if ns.plot:
        from vllm_hust_vspec.bench.plot import PlotUnavailable, plot_pair

        try:
            plot_pair(result.to_dict(), result.traces, ns.plot)
            print(f"plot: {ns.plot}")
        except PlotUnavailable as exc:
            _err(str(exc))
    return 0 if result.comparison.passed else EXIT_FAIL


def build_protocol_parser() -> argparse.ArgumentParser:
    """Parser of the ARC-Easy protocol bench (``vllm-hust-vspec-bench --method M``)."""
    from vllm_hust_vspec.bench import protocol as pr

    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="ARC-Easy protocol bench against a running 'vllm-hust-vspec --protocol "
                    f"arc-easy --method M' server: {pr.NUM_PROMPTS} prompts x {pr.OUTPUT_LEN} "
                    "output tokens, unlimited rate, temperature 0. Subcommands 'run' and "
                    "'pair' are the general benchmarks (see --help without --method).",
        epilog=EPILOG,
    )
    p.add_argument("--method", required=True, choices=pr.METHODS,
                   help="the speculative method the server runs (picks its arc-easy preset)")
    p.add_argument("--dataset-path", type=Path, default=pr.DEFAULT_DATASET, metavar="FILE.jsonl",
                   help=f"materialised ARC-Easy prompts ({pr.DEFAULT_DATASET}): 'prompt' lines "
                        "or the ai2_arc shape")
    p.add_argument("--output-dir", type=Path, default=pr.DEFAULT_OUTPUT_ROOT, metavar="DIR",
                   help=f"results root ({pr.DEFAULT_OUTPUT_ROOT}); the result is "
                        "DIR/ARC-Easy-<method>-vspec/ARC-Easy.json")
    p.add_argument("--base-url", help="server (default http://127.0.0.1:<the preset's port>)")
    p.add_argument("--model", help="served model name (default: the preset's)")
    p.add_argument("--tokenizer", help="local tokenizer folder for --backend vllm (default: the "
                                       "preset's target model, when found locally)")
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="vllm: vLLM's own bench serve; builtin: the standard-library client; "
                        "auto: vllm when importable and a tokenizer is known")
    p.add_argument("--num-prompts", type=_count, default=pr.NUM_PROMPTS,
                   help=f"measured requests ({pr.NUM_PROMPTS}; others are not the protocol)")
    p.add_argument("--output-len", type=_count, default=pr.OUTPUT_LEN,
                   help=f"output tokens per request ({pr.OUTPUT_LEN})")
    p.add_argument("--warmup-prompts", type=_bounded(int, 0), default=8,
                   help="unmeasured requests before the run (8)")
    p.add_argument("--dry-run", action="store_true", help="print the command, then exit")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return p


def protocol_main(args: Sequence[str]) -> int:
    """``vllm-hust-vspec-bench --method draft|eagle``: the predecessor's ARC-Easy bench."""
    from vllm_hust_vspec.bench import protocol as pr
    from vllm_hust_vspec.bench.run import requests_for, run_once, vllm_command
    from vllm_hust_vspec.bench.server import ServerStartError
    from vllm_hust_vspec.launch.models import with_checkout_model_dir
    from vllm_hust_vspec.settings import SettingsError

    ns = build_protocol_parser().parse_args(list(args))

    def run() -> int:
        env, _ = with_checkout_model_dir(os.environ)
        plan = pr.plan_protocol(
            ns.method, dataset_path=ns.dataset_path, output_root=ns.output_dir, env=env,
            base_url=ns.base_url, model=ns.model, tokenizer=ns.tokenizer,
            num_prompts=ns.num_prompts, output_len=ns.output_len,
            warmup_prompts=ns.warmup_prompts,
        )
        requests_for(plan.load)  # a bad line fails before anything is sent
        backend = choose_backend(ns.backend, plan.target)
        for note in plan.notes():
            print(f"{PROG}: note: {note}", file=sys.stderr)
        if backend == "builtin" and ns.backend == "auto":
            print(f"{PROG}: note: measuring with the built-in client (vllm bench serve needs "
                  "vLLM here and --tokenizer); the result keeps vllm bench serve's key names",
                  file=sys.stderr)
        result_file = plan.out_dir / f"{pr.RESULT_NAME}.json"
        if ns.dry_run:
            print(f"# load: {plan.load.describe()}\n# target: {plan.target.base_url} "
                  f"(model {plan.target.model}); backend {backend}; result {result_file}")
            if backend == "vllm":
                argv, _, data = vllm_command(plan.target, plan.target.model or "", plan.load,
                                             plan.out_dir, pr.RESULT_NAME)
                print(f"# prompts from {ns.dataset_path} are written to {data} first")
                print(shlex.join(argv))
            return 0
        prog = ProgressLine(enabled=not ns.quiet)
        prog.start(f"ARC-Easy {ns.method}")
        out = run_once(plan.target, plan.load, backend=backend, workdir=plan.out_dir,
                       name=pr.RESULT_NAME, progress=prog.requests, log=prog.message)
        print(run_summary(out.result))
        print(f"result: {out.path}")
        return 0

    return _exit_status(run, (DatasetError, SettingsError, ValueError),
                        (BenchError, ServerStartError, OSError))


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status."""
    from vllm_hust_vspec.bench.server import ServerStartError
    from vllm_hust_vspec.launch.models import ModelNotFoundError
    from vllm_hust_vspec.settings import SettingsError

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("run", "pair", "-h", "--help", "--version"):
        return protocol_main(args)
    ours, passthrough = split_passthrough(args)
    ns = build_parser().parse_args(ours)
    if passthrough and ns.mode != "pair":
        _err("arguments after '--' are only for 'pair' (they go to vllm serve)")
        return EXIT_USAGE

    def run() -> int:
        load = _load(ns)
        if ns.mode == "run":
            return _main_run(ns, load)
        return _main_pair(ns, load, passthrough)

    return _exit_status(run, (DatasetError, SettingsError, ModelNotFoundError, ValueError),
                        (BenchError, ServerStartError, OSError))


def _exit_status(run: Callable[[], int], usage: tuple[type[BaseException], ...],
                 errors: tuple[type[BaseException], ...]) -> int:
    """``run()``'s status; a usage error exits 2, a run failure 3, ^C 130 (one line each)."""
    try:
        return run()
    except usage as exc:
        _err(str(exc))
        return EXIT_USAGE
    except errors as exc:
        _err(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
