#!/usr/bin/env python3
"""Stuck runs under a toggling CPU hog (the online controller's bar): invocations of
bench_cpu_e2e.py, each beside a CPU hog with its own seed, and the adaptive runs that spent at
least half their steps at a losing arm.

An arm is losing when its fixed-gamma median, pooled over every invocation's repetitions, is
below 0.9 x the best fixed one's (one invocation's medians under the hog are too noisy to tell
arms apart). Every invocation starts a fresh engine, so each one's start-up calibration also
runs beside the hog. Throughput ratios under the hog are not a figure of merit here; where
each adaptive run spent its steps is.

    .venv/bin/python scripts/bench_cpu_hog.py                    # 6 invocations, noise-medium
    .venv/bin/python scripts/bench_cpu_hog.py --invocations 2 --drafter draft-cheap-agree

The hog alone (``--hog-only``): one busy core on for a random 0.05-0.6 s, off for as long,
until killed or ``--seconds`` have passed; run it beside any benchmark to load the machine the
way a noisy neighbour does (the load the controller's filter has to tell from arm costs)::

    .venv/bin/python scripts/bench_cpu_hog.py --hog-only --seconds 300 &
    .venv/bin/python scripts/bench_cpu_e2e.py --drafters draft-noise-medium --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_cpu_e2e import ADAPTIVE, MAX_K, losing_arms, stuck_runs  # beside this script
from vllm_hust_vspec.adaptive._limits import bucket_index

HERE = Path(__file__).resolve().parent
BENCH_BATCH = 8  # concurrent prompts of every invocation (bench_cpu_e2e.py --batch)


def hog(seconds: float, seed: int, min_s: float = 0.05, max_s: float = 0.6) -> None:
    """Toggle one busy core: on and off in random phases of ``min_s``..``max_s`` seconds
    (seeded), for ``seconds``."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    busy = True
    while time.monotonic() < end:
        phase_end = time.monotonic() + rng.uniform(min_s, max_s)
        if busy:
            x = 0
            while time.monotonic() < phase_end:
                x += 1  # spin
        else:
            time.sleep(max(0.0, phase_end - time.monotonic()))
        busy = not busy


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0].replace("\n", " "),
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invocations", type=int, default=6, help="hog seeds 1..N")
    parser.add_argument("--drafter", default="draft-noise-medium",
                        help="one drafter of bench_cpu_e2e.py --drafters")
    parser.add_argument("--reps", type=int, default=2, help="repetitions per invocation")
    parser.add_argument("--tokens", type=int, default=160, help="output tokens per prompt")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="also keep every invocation's bench_cpu_e2e.py JSON here")
    only = parser.add_argument_group("the hog alone")
    only.add_argument("--hog-only", action="store_true",
                      help="run only the toggling hog (no benchmark) and exit")
    only.add_argument("--seconds", type=float, default=600.0, help="stop the hog after this long")
    only.add_argument("--seed", type=int, default=0, help="seed of the on/off durations")
    args = parser.parse_args()
    if args.hog_only:
        hog(args.seconds, args.seed)
        return 0
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    runs = []
    with tempfile.TemporaryDirectory(prefix="vspec-hog-") as tmp:
        for n in range(1, args.invocations + 1):
            out = Path(tmp) / f"run{n}.json"
            hogging = subprocess.Popen([sys.executable, __file__, "--hog-only",
                                        "--seconds", "900", "--seed", str(n)])
            try:
                # the engines as vLLM leaves them in-process: with one torch thread the hog
                # would mostly get the other core to itself, and with the heap frozen again a
                # run is about twice as fast, shorter than a hog phase, so the pooled
                # fixed-arm medians that say which arms lose turn to noise
                subprocess.run([sys.executable, str(HERE / "bench_cpu_e2e.py"),
                                "--drafters", args.drafter, "--reps", str(args.reps),
                                "--batch", str(BENCH_BATCH), "--setup", "vllm",
                                "--tokens", str(args.tokens), "--json", str(out)],
                               env=env, check=False, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            finally:
                hogging.kill()
                hogging.wait()
            # (its exit status is its own throughput targets, not met under a hog by design)
            text = out.read_text()
            runs.append(json.loads(text)[args.drafter])
            if args.keep:
                (args.keep / out.name).write_text(text)
            print(f"invocation {n}/{args.invocations} done", file=sys.stderr, flush=True)
    pooled = {f"fixed:{g}": statistics.median(
        x for r in runs for x in r["tokens_per_s"][f"fixed:{g}"]) for g in range(MAX_K + 1)}
    losing = losing_arms(pooled)
    print(f"\n{args.drafter} under a toggling CPU hog, {args.invocations} invocations x "
          f"{args.reps} runs of {args.tokens} tokens per adaptive arm")
    print("pooled fixed-gamma medians (tokens/s): "
          + ", ".join(f"{g}: {v:.0f}{' (losing)' if losing[i] else ''}"
                      for i, (g, v) in enumerate(pooled.items())))
    print("runs with >= half their steps at a losing arm, per invocation, and steps per gamma:")
    ok = True
    for arm in ADAPTIVE:
        arm_runs = [steps for r in runs for steps in r["gamma_steps"][arm]]
        stuck = [stuck_runs(pooled, r["gamma_steps"][arm]) for r in runs]
        total = [int(sum(col)) for col in zip(*arm_runs, strict=True)]
        print(f"  {arm:14s} stuck {sum(stuck)} of {len(arm_runs)}"
              f" runs {stuck}  steps per gamma {total}")
        if arm in ("vspec", "vspec-cold"):
            ok &= sum(stuck) == 0
    print(f"start-up prior per invocation (what vspec-cold starts from; at batch {BENCH_BATCH}, "
          "step time over the skipped zero's per gamma, in its bucket):")
    for n, r in enumerate(runs, 1):
        stuck = any(stuck_runs(pooled, r["gamma_steps"][a]) for a in ("vspec", "vspec-cold"))
        print(f"  {n}: {prior_shape(r)}" + ("  <- a stuck run" if stuck else ""))
    print("\ntarget: no stuck run of vspec or vspec-cold (a controller from the start-up "
          "calibration): " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def prior_shape(run: dict[str, Any], batch: int = BENCH_BATCH) -> str:
    """One invocation's start-up prior in ``batch``'s bucket (the calibration times each
    bucket at one batch, its middle): each gamma's step time over the skipped zero's
    (bench_cpu_e2e.py --json records the prior)."""
    rows = run.get("startup_prior") or []
    if not rows:
        return "none recorded"
    timed = {row["batch"] for row in rows if bucket_index(row["batch"]) == bucket_index(batch)}
    if not timed:
        return f"no step timed in batch {batch}'s bucket"
    batch = min(timed)
    times = {(row["gamma"], row["drafter_ran"]): row["seconds"] for row in rows
             if row["batch"] == batch}
    zero = times.get((0, False))
    if not zero:
        return f"batch {batch}: no skipped-zero step"
    return f"batch {batch}: " + ", ".join(
        f"{g}: {times[(g, True)] / zero:.2f}" for g in range(1, MAX_K + 1) if (g, True) in times)


if __name__ == "__main__":
    sys.exit(main())
