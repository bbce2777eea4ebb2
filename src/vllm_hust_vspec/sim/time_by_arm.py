"""Where a vSpec server's step time went, read from its adaptive trace.

Per verified gamma, with the drafter run or skipped: the steps and their seconds, and what the
steps off the sticky zero cost beyond the median steady skipped step (the price of speculating
or exploring where speculation does not pay).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def read_steps(path: Path, after_idle: float | None) -> list[dict[str, Any]]:
    """The trace's step records (the header skipped), from the first idle gap of
    ``after_idle`` seconds on when given (all of them when there is none)."""
    steps = [rec for rec in (json.loads(line) for line in path.read_text().splitlines()
                             if line.strip()) if "step" in rec]
    if after_idle is not None:
        for i in range(1, len(steps)):
            if steps[i]["t"] - steps[i - 1]["t"] > after_idle:
                return steps[i:]
    return steps


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps and seconds per (gamma, drafter ran), and the excess of the steps off the sticky
    zero over the median steady skipped step (``None`` without such a step)."""
    by_arm: dict[tuple[int, bool], list[float]] = defaultdict(list)
    for rec in steps:
        by_arm[(int(rec["gamma"]), not rec["skip"])].append(float(rec["interval_s"]))
    zero = [float(r["interval_s"]) for r in steps if r["skip"] and r["gamma"] == 0
            and r["steady"]]
    base = statistics.median(zero) if zero else None
    off = [float(r["interval_s"]) for r in steps if not (r["skip"] and r["gamma"] == 0)]
    total = sum(float(r["interval_s"]) for r in steps)
    excess = sum(t - base for t in off) if base is not None else None
    return {"steps": len(steps), "seconds": total, "zero_step_s": base, "off_zero": len(off),
            "excess_s": excess, "arms": {k: (len(v), sum(v)) for k, v in by_arm.items()}}


def report_line(path: Path, s: dict[str, Any]) -> str:
    """One line of the report for the trace at ``path`` summarized as ``s``."""
    if not s["steps"]:
        return f"{path}: no steps"
    arms = ", ".join(f"g{g}{'' if ran else ' skip'} {n} / {sec * 1e3:.0f} ms"
                     for (g, ran), (n, sec) in sorted(s["arms"].items()))
    line = f"{path}: {s['steps']} steps, {s['seconds']:.2f} s ({arms})"
    if s["excess_s"] is not None:
        line += (f"; {s['off_zero']} steps off the sticky zero cost "
                 f"{s['excess_s'] * 1e3:.0f} ms over {s['zero_step_s'] * 1e3:.2f} ms each, "
                 f"{s['excess_s'] / s['seconds'] * 100:.1f}% of the steps' time")
    return line
