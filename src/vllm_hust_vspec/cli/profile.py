"""``vllm-hust-vspec-profile``: measure step latency offline and write a fitted profile.

Examples::

    vllm-hust-vspec-profile --protocol cpu-tiny --out profiles/my-run
    vllm-hust-vspec-profile --target-model /m/target --draft-model /m/draft --method draft \\
        --dtype bfloat16 --batch-sizes 1,4,16,64 --gammas 0,1,2,3,4 --output-lens 128,512
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from vllm_hust_vspec._version import __version__
from vllm_hust_vspec.cli.options import add_settings_arguments, cli_values

PROG = "vllm-hust-vspec-profile"

EPILOG = """\
Each grid cell runs `batch` requests of `output length` greedy tokens with gamma held fixed
(vSpec's scheduler hook with a constant controller; gamma 0 skips the drafter) on an
in-process vLLM engine, and records every steady full-batch step's wall interval. The latency
model is fitted by non-negative least squares (adaptive.fit_profile); the measured best gamma
per batch becomes the profile's batch_gamma_table, the measured per-position acceptance its
default_acceptance. A profile is valid only for the model pair, dtype, batch range and
hardware it was measured on.

exit status: 0 written, 1 measurement or fit failed, 2 bad arguments or configuration.
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The profiler's parser (grid flags plus every launcher settings flag)."""
    p = argparse.ArgumentParser(
        prog=PROG, description="Profile the host offline and fit a vSpec latency profile.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("--protocol", "--preset", dest="protocol", metavar="NAME",
                   help="launcher preset for models, method, dtype and limits")
    p.add_argument("--config", metavar="FILE", help="TOML config over the preset")
    g = p.add_argument_group("grid")
    g.add_argument("--batch-sizes", type=_ints, default=None, metavar="B,B,...",
                   help="batch sizes (default: powers of two up to max_num_seqs, at most 64)")
    g.add_argument("--gammas", type=_ints, default=None, metavar="G,G,...",
                   help="fixed gammas (default: 0..gamma)")
    g.add_argument("--output-lens", type=_ints, default=(64, 160), metavar="N,N,...",
                   help="output tokens per request, one cell each (default 64,160)")
    g.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per request (32)")
    g.add_argument("--repeats", type=int, default=3,
                   help="runs of every cell, a grid pass apart; the median one is used (3)")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("vspec-profile"),
                   help="folder for profile.json and measurements.json (./vspec-profile)")
    o.add_argument("--name", help="profile name (default <target>-<method>-<dtype>)")
    o.add_argument("--no-weight-hashes", action="store_true",
                   help="record weight file sizes only (hashing huge checkpoints is slow)")
    o.add_argument("--no-context-terms", action="store_true",
                   help="fit without per-context-token coefficients")
    o.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    o.add_argument("--quiet", action="store_true", help="no per-cell progress")
    add_settings_arguments(p)
    return p


def default_batches(max_num_seqs: int | None) -> tuple[int, ...]:
    """1, 2, 4, ... up to max_num_seqs (8 when unset, capped at 64), plus the maximum."""
    top = min(max_num_seqs or 8, 64)
    out = [1 << i for i in range(top.bit_length()) if (1 << i) <= top]
    return tuple(sorted({*out, top}))


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status."""
    from vllm_hust_vspec.adaptive.fitting import FitError
    from vllm_hust_vspec.adaptive.profile import ProfileError
    from vllm_hust_vspec.launch.models import (
        MODEL_DIR_ENV,
        ModelNotFoundError,
        with_checkout_model_dir,
    )
    from vllm_hust_vspec.profiling import GridError, ProfileGrid, collect, plan_profile
    from vllm_hust_vspec.profiling.grid import summary_lines
    from vllm_hust_vspec.settings import SettingsError, resolve_settings

    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    env, tiny = with_checkout_model_dir(os.environ)  # what ./run.sh would export
    if tiny is not None:
        print(f"{PROG}: note: {MODEL_DIR_ENV} is unset; looking up models in this checkout's "
              f"{tiny}, as ./run.sh does", file=sys.stderr)
    try:
        resolved = resolve_settings(preset=ns.protocol, config=ns.config, cli=cli_values(ns),
                                    env=os.environ)
        s = resolved.settings
        gammas = ns.gammas or tuple(range(0, s.effective_gamma() + 1))
        grid = ProfileGrid(batch_sizes=ns.batch_sizes or default_batches(s.max_num_seqs),
                           gammas=gammas, output_lens=ns.output_lens,
                           prompt_len=ns.prompt_len, repeats=ns.repeats)
        grid.validate()
        plan = plan_profile(resolved, env, grid, out_dir=ns.out, name=ns.name,
                            hash_weights=not ns.no_weight_hashes,
                            context_terms=not ns.no_context_terms)
    except (SettingsError, ModelNotFoundError, GridError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(plan.describe())
    if ns.dry_run:
        return 0
    for key, value in resolved.extra_env.items():  # the preset's [env] (e.g. KV cache size)
        os.environ.setdefault(key, value)

    def log(msg: str) -> None:
        if not ns.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        outcome, _ = collect(plan, log=log)
    except (FitError, ProfileError) as exc:
        print(f"{PROG}: error: the measurements could not be fitted: {exc}", file=sys.stderr)
        return 1
    except (RuntimeError, OSError, ValueError) as exc:
        print(f"{PROG}: error: measurement failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(summary_lines(outcome)))
    print(f"wrote {plan.profile_path} and {plan.measurements_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
