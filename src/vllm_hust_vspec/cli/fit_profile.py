"""``vllm-hust-vspec-fit-profile``: fit a schema-v1 profile to measured decode steps."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vllm_hust_vspec.adaptive._files import write_text_atomic
from vllm_hust_vspec.adaptive.fitting import FitError, SamplesFileError, fit_profile, load_samples
from vllm_hust_vspec.adaptive.profile import ProfileError

_EPILOG = """\
samples.json is a list of measured decode steps (or {"samples": [...]}), one object each:
  batch_size (int >= 1), gamma (int >= 0), step_s (seconds > 0),
  num_batched_tokens (int, default batch_size * (1 + gamma)),
  context_tokens (KV tokens summed over the batch, default 0),
  draft_s, target_s (optional seconds; give each for every sample or none).
The measurements.json that vllm-hust-vspec-profile writes is valid input as it is: its
bookkeeping keys (committed, output_len, repeat) are checked and ignored, and samples with
"selected": false (repeats the profiler did not fit) are skipped.
See docs/controller.md for the latency model and the profile schema.

exit status: 0 written, 1 samples invalid or not fittable, or the profile cannot be written,
2 bad arguments (including a samples file that cannot be read or is not UTF-8 JSON).
"""


def _acceptance(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a probability or comma-separated probabilities, got {text!r}") from None
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"probabilities must be in [0, 1], got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    """Argument parser (exposed for docs and tests)."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-fit-profile",
        description="Fit the profile latency model (target/draft seconds per batched token, "
                    "per context token and constant, plus per-gamma overhead) to measured "
                    "decode steps by non-negative least squares, and write a schema-v1 profile "
                    "for --adaptive-policy profile.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("samples", type=Path, help="measured steps (JSON, format below)")
    p.add_argument("profile", type=Path, help="profile JSON to write (replaced atomically)")
    p.add_argument("--name", default="", help="profile name recorded in the file")
    p.add_argument("--method", default="", help="speculative method recorded in the file "
                   "(informational, e.g. eagle, mtp, draft_model)")
    p.add_argument("--default-acceptance", type=_acceptance, default=(0.6,), metavar="P[,P...]",
                   help="acceptance before online data: one conditional rate a (positions get "
                        "a, a^2, ...) or unconditional per-position rates (default 0.6)")
    p.add_argument("--assumed-context-tokens", type=int, default=None, metavar="N",
                   help="context tokens per request the policy assumes (default: mean over "
                        "the samples)")
    p.add_argument("--no-context-terms", action="store_true",
                   help="fit without per-context-token coefficients (when the samples do not "
                        "vary context length)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        samples = load_samples(args.samples)
        result = fit_profile(
            samples,
            context_terms=not args.no_context_terms,
            default_acceptance=args.default_acceptance,
            assumed_context_tokens=args.assumed_context_tokens,
            name=args.name,
            method=args.method,
        )
    except SamplesFileError as exc:  # the wrong file was named: a usage error
        print(f"vllm-hust-vspec-fit-profile: error: {exc}", file=sys.stderr)
        return 2
    except (FitError, ProfileError) as exc:
        print(f"vllm-hust-vspec-fit-profile: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result.profile.to_dict(), indent=2) + "\n"
    try:
        write_text_atomic(args.profile, text)
    except OSError as exc:
        print(f"vllm-hust-vspec-fit-profile: error: cannot write {args.profile}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    prof = result.profile
    print(f"fitted {result.num_samples} samples ({result.mode})")
    print(f"residual: rmse {result.residual * 1e3:.4f} ms, relative "
          f"{result.relative_residual * 100:.2f}%, max {result.max_abs_residual * 1e3:.4f} ms")
    for part, co in (("target", prof.target), ("draft", prof.draft)):
        print(f"{part}: constant {co.constant_s:.6g} s, per batched token "
              f"{co.per_batched_token_s:.6g} s, per context token {co.per_context_token_s:.6g} s")
    print(f"per-gamma overhead: {prof.per_gamma_overhead_s:.6g} s")
    print(f"wrote {args.profile}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
