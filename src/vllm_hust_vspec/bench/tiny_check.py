"""Smoke-check the tiny fixtures from ``scripts/build_tiny_models.py`` as drafters in real vLLM
(CPU).

For every drafter it starts an in-process vLLM engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
with ``speculative_config``, decodes 8 prompts x 32 tokens greedily, checks the tokens are
identical to the target-only run, and reads acceptance from ``llm.get_metrics()``.
``--bench`` also times target-deep alone vs ``draft_model`` K=1..4 with the cheap drafts
(batch 8 x 64 tokens) so an adaptive controller has something to find.

Each group of cases runs in its own subprocess (one engine after another inside it); use
``--isolate`` for one process per case. ngram is never run here (it poisons the process).

Usage: ``python scripts/build_tiny_models.py check [--models DIR] [--bench] [--json OUT]``.
Exit status 1 when any case fails or differs from target-only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vllm_hust_vspec.launch.models import CHECKOUT_ROOT

DEFAULT_MODELS = CHECKOUT_ROOT / ".cache" / "models"  # where build_tiny_models.py writes
MANIFEST = "manifest.json"  # build_tiny_models.py's record of what it built

PROMPTS = [
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\n\ndef main():\n",
    "class Stack:\n    def __init__(self):\n        self.",
    "    for key, value in sorted(items.items()):\n        if ",
    "# Copyright (C) Python Software Foundation\n\"\"\"Utilities for ",
    "        except KeyError:\n            raise ValueError(",
    "    def __repr__(self):\n        return '%s(%r)' % (",
    "if __name__ == '__main__':\n    ",
]

# (case name, target model, speculative config without the model path, drafter model or None)
CASES: list[tuple[str, str, dict[str, Any] | None, str | None]] = [
    ("target", "target", None, None),
    ("draft", "target", {"method": "draft_model", "num_speculative_tokens": 3}, "draft"),
    ("draft-copy", "target", {"method": "draft_model", "num_speculative_tokens": 3}, "draft-copy"),
    ("draft-noise-medium", "target", {"method": "draft_model", "num_speculative_tokens": 3},
     "draft-noise-medium"),
    ("draft-noise-poor", "target", {"method": "draft_model", "num_speculative_tokens": 3},
     "draft-noise-poor"),
    ("eagle", "target", {"method": "eagle", "num_speculative_tokens": 3}, "eagle"),
    ("eagle3", "target", {"method": "eagle3", "num_speculative_tokens": 3}, "eagle3"),
    ("target-deep", "target-deep", None, None),
    ("draft-cheap-agree", "target-deep", {"method": "draft_model", "num_speculative_tokens": 3},
     "draft-cheap-agree"),
    ("draft-cheap-random", "target-deep", {"method": "draft_model", "num_speculative_tokens": 3},
     "draft-cheap-random"),
    ("mtp-target", "mtp-target", None, None),
    ("mtp", "mtp-target", {"method": "mtp", "num_speculative_tokens": 1}, None),
    ("mtp-k2", "mtp-target", {"method": "mtp", "num_speculative_tokens": 2}, None),
    # ngram last and in its own process: later engines in that process fail (HOST_NOTES)
    ("ngram", "target", {"method": "ngram", "num_speculative_tokens": 3,
                         "prompt_lookup_min": 1, "prompt_lookup_max": 3}, None),
]
OWN_PROCESS = {"ngram"}
BASELINES = {"target": "target", "target-deep": "target-deep", "mtp-target": "mtp-target"}
BENCH = [("target-deep", None, 0)] + [
    (d, "draft_model", k) for d in ("draft-cheap-agree", "draft-cheap-random") for k in (1, 2, 3, 4)
]


def load_manifest(models: Path) -> dict[str, Any] | None:
    """The build's manifest in ``models``, or None when absent or unreadable."""
    try:
        data = json.loads((models / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1",
               TOKENIZERS_PARALLELISM="false")
    env.pop("HUST_VSPEC_ENABLED", None)  # measure stock vLLM, not the plugin
    return env


def _spec_metrics(llm: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            key = m.name.removeprefix("vllm:spec_decode_")
            out[key] = list(m.values) if hasattr(m, "values") else m.value
    return out


def _make_llm(models: Path, target: str, spec: dict[str, Any] | None, drafter: str | None) -> Any:
    from vllm import LLM

    if spec is not None:
        spec = dict(spec)
        if drafter is not None:
            spec["model"] = str(models / drafter)
    return LLM(model=str(models / target), dtype="float32", max_model_len=256, enforce_eager=True,
               disable_log_stats=False, seed=0, speculative_config=spec)


def _run_case(models: Path, case: tuple[str, str, dict[str, Any] | None, str | None]
              ) -> dict[str, Any]:
    """One engine: greedy 8x32, token ids and spec-decode counters (deltas)."""
    import gc

    from vllm import SamplingParams

    name, target, spec, drafter = case
    t0 = time.monotonic()
    llm = _make_llm(models, target, spec, drafter)
    start_s = time.monotonic() - t0
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    before = _spec_metrics(llm)
    t1 = time.monotonic()
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    gen_s = time.monotonic() - t1
    after = _spec_metrics(llm)
    delta: dict[str, Any] = {}
    for k, v in after.items():
        b = before.get(k, 0 if not isinstance(v, list) else [0] * len(v))
        delta[k] = [x - y for x, y in zip(v, b, strict=False)] if isinstance(v, list) else v - b
    del llm
    gc.collect()
    drafted = delta.get("num_draft_tokens", 0)
    return {
        "case": name, "target": target, "spec": spec, "drafter": drafter,
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "text0": outs[0].outputs[0].text, "engine_start_s": round(start_s, 1),
        "generate_s": round(gen_s, 2), "metrics": delta,
        "acceptance": round(delta.get("num_accepted_tokens", 0) / drafted, 4) if drafted else None,
    }


def _run_bench(models: Path, reps: int) -> list[dict[str, Any]]:
    """tokens/s for target-deep alone and with cheap drafts at fixed K (batch 8 x 64)."""
    import gc

    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    rows = []
    for drafter, method, k in BENCH:
        spec = None if method is None else {"method": method, "num_speculative_tokens": k}
        llm = _make_llm(models, "target-deep", spec, drafter)
        llm.generate(PROMPTS, params, use_tqdm=False)  # warm-up
        best = float("inf")
        before = _spec_metrics(llm)
        for _ in range(reps):
            t = time.monotonic()
            llm.generate(PROMPTS, params, use_tqdm=False)
            best = min(best, time.monotonic() - t)
        after = _spec_metrics(llm)
        drafted = after.get("num_draft_tokens", 0) - before.get("num_draft_tokens", 0)
        acc = after.get("num_accepted_tokens", 0) - before.get("num_accepted_tokens", 0)
        rows.append({"drafter": drafter or "(none)", "k": k,
                     "tokens_per_s": round(len(PROMPTS) * 64 / best, 1),
                     "acceptance": round(acc / drafted, 3) if drafted else None})
        print(f"BENCH {rows[-1]}", file=sys.stderr, flush=True)
        del llm
        gc.collect()
    return rows


def _child(args: argparse.Namespace) -> int:
    if args.bench_child:
        print("RESULT " + json.dumps({"bench": _run_bench(args.models, args.reps)}), flush=True)
        return 0
    by_name = {c[0]: c for c in CASES}
    for name in args.child:
        try:
            res = _run_case(args.models, by_name[name])
        except Exception as exc:  # report and keep going: one broken drafter != all broken
            res = {"case": name, "error": f"{type(exc).__name__}: {exc}"}
        print("RESULT " + json.dumps(res), flush=True)
    return 0


def _spawn(extra: list[str], models: Path, log: Path | None) -> list[dict[str, Any]]:
    cmd = [sys.executable, "-m", __name__, "--models", str(models), *extra]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    if log is not None:
        with open(log, "a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stderr}\n")
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    if proc.returncode != 0 and not results:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        results = [{"case": " ".join(extra), "error": f"exit {proc.returncode}: {tail}"}]
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the cases (and ``--bench``), print the table; 1 when any case failed."""
    ap = argparse.ArgumentParser(
        prog="build_tiny_models.py check",
        description=__doc__.split("\n\n", 1)[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=DEFAULT_MODELS,
                    help=f"the built models (default {DEFAULT_MODELS})")
    ap.add_argument("--only", nargs="*", help="case names (default: all)")
    ap.add_argument("--isolate", action="store_true", help="one process per case")
    ap.add_argument("--bench", action="store_true", help="also run the tokens/s table")
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions per bench config")
    ap.add_argument("--json", type=Path, help="write all results here")
    ap.add_argument("--log", type=Path, help="append child stderr here")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--bench-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None or args.bench_child:
        return _child(args)

    man = load_manifest(args.models)
    if man is None:
        print(f"error: no manifest in {args.models}; run scripts/build_tiny_models.py --out "
              f"{args.models} first", file=sys.stderr)
        return 2
    names = args.only or [c[0] for c in CASES]
    unknown = set(names) - {c[0] for c in CASES}
    if unknown:
        print(f"error: unknown case(s) {sorted(unknown)}; known: {[c[0] for c in CASES]}",
              file=sys.stderr)
        return 2
    # one process per target (baseline first, then its drafters); OWN_PROCESS cases last
    wanted = set(names) | {c[1] for c in CASES if c[0] in names}
    groups: dict[str, list[str]] = {}
    for name, target, _, _ in CASES:
        if name in wanted:
            key = name if name in OWN_PROCESS or args.isolate else target
            groups.setdefault(key, []).append(name)
    order = sorted(groups, key=lambda k: k in OWN_PROCESS)
    results: list[dict[str, Any]] = []
    for key in order:
        print(f"[check] process: {' '.join(groups[key])}", flush=True)
        results += _spawn(["--child", *groups[key]], args.models, args.log)
    base = {r["case"]: r["tokens"] for r in results if r["case"] in BASELINES and "tokens" in r}
    failed = False
    print(f"\n{'case':20s} {'target':12s} {'method':12s} {'K':>2s} {'identical':>9s} "
          f"{'accept':>7s} {'agree(manifest)':>15s} {'per-pos accepted'}")
    for r in results:
        if "error" in r:
            failed = True
            print(f"{r['case']:20s} ERROR {r['error']}")
            continue
        spec = r["spec"] or {}
        same = r["tokens"] == base.get(r["target"]) if r["case"] not in BASELINES else True
        r["identical_to_target"] = same
        failed |= not same
        m = man["models"].get(r["drafter"] or "", {}) if r["drafter"] else (
            man["models"].get(r["target"], {}) if spec.get("method") == "mtp" else {})
        agree = m.get("greedy_agreement", m.get("step1_agreement", ""))
        print(f"{r['case']:20s} {r['target']:12s} {spec.get('method', '-'):12s} "
              f"{spec.get('num_speculative_tokens', 0):2d} {str(same):>9s} "
              f"{r['acceptance'] if r['acceptance'] is not None else '-':>7} {agree!s:>15} "
              f"{r['metrics'].get('num_accepted_tokens_per_pos', '')}")
    bench: list[dict[str, Any]] = []
    if args.bench:
        print("\n[check] bench: target-deep, batch 8 x 64 tokens", flush=True)
        out = _spawn(["--bench-child", "--reps", str(args.reps)], args.models, args.log)
        bench = out[0].get("bench", []) if out else []
        if not bench:
            failed = True
            print(f"bench failed: {out}")
        base_tps = next((b["tokens_per_s"] for b in bench if b["k"] == 0), None)
        print(f"{'drafter':20s} {'K':>2s} {'tok/s':>8s} {'x base':>7s} {'accept':>7s}")
        for b in bench:
            ratio = b["tokens_per_s"] / base_tps if base_tps else float("nan")
            print(f"{b['drafter']:20s} {b['k']:2d} {b['tokens_per_s']:8.1f} {ratio:7.2f} "
                  f"{b['acceptance'] if b['acceptance'] is not None else '-':>7}")
    if args.json:
        args.json.write_text(json.dumps({"cases": results, "bench": bench}, indent=2) + "\n")
    print("\nFAILED" if failed else "\nOK: every drafter ran and matched target-only output")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
