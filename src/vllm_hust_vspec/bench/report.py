"""Human output: progress lines and summary tables (plain text / Markdown)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from vllm_hust_vspec.bench.stats import (
    LATENCY_METRICS,
    LATENCY_PERCENTILES,
    PairComparison,
    Spread,
    pooled_ratios,
)

FIGURE_LABELS = {
    "output_throughput": "output throughput (tok/s)",
    "request_throughput": "request throughput (req/s)",
    "mean_tpot_ms": "mean TPOT (ms)",
    "median_tpot_ms": "median TPOT (ms)",
    "mean_ttft_ms": "mean TTFT (ms)",
    "median_ttft_ms": "median TTFT (ms)",
    "mean_itl_ms": "mean ITL (ms)",
    "mean_e2el_ms": "mean end-to-end latency (ms)",
    **{f"p{q}_{m}_ms": f"p{q} {m.upper()} (ms)" for m in LATENCY_METRICS
       for q in LATENCY_PERCENTILES},
}


SOURCE_LABELS = {"vspec": "vspec_ counters", "vllm": "vllm:spec_decode counters"}


class ProgressLine:
    """Progress on stderr: one rewritten line on a terminal, a line per 25 % otherwise."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.label = ""
        self._last_quarter = -1
        self._last_draw = 0.0

    def start(self, label: str) -> None:
        self.label = label
        self._last_quarter = -1

    def requests(self, done: int, total: int, elapsed: float) -> None:
        """Callback for the load generator."""
        if not self.enabled:
            return
        text = f"[{self.label}] {done}/{total} requests, {elapsed:.1f} s"
        if self.tty:
            now = time.monotonic()
            if done == total or now - self._last_draw > 0.2:
                self._last_draw = now
                end = "\n" if done == total else ""
                self.stream.write("\r" + text.ljust(60) + end)
                self.stream.flush()
            return
        quarter = done * 4 // max(total, 1)
        if quarter != self._last_quarter:
            self._last_quarter = quarter
            self.stream.write(text + "\n")
            self.stream.flush()

    def waiting(self, elapsed: float) -> None:
        """Callback while a server starts."""
        if not self.enabled:
            return
        if self.tty:
            self.stream.write(f"\r[{self.label}] starting server... {elapsed:.0f} s".ljust(60))
            self.stream.flush()
        elif int(elapsed) % 15 == 0:
            self.stream.write(f"[{self.label}] starting server... {elapsed:.0f} s\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        if self.enabled:
            if self.tty:
                self.stream.write("\r" + " " * 60 + "\r")
            self.stream.write(text + "\n")
            self.stream.flush()


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def _spread(s: Spread) -> str:
    if len(s.values) <= 1:
        return _fmt(s.median)
    return f"{s.median:.2f} [{s.low:.2f}-{s.high:.2f}]"


def run_summary(result: Mapping[str, Any]) -> str:
    """Plain-text summary of one run."""
    spec = result.get("spec") or {}
    lines = [
        f"completed {result.get('completed')} requests ({result.get('failed', 0)} failed) in "
        f"{_fmt(result.get('duration'))} s (backend {result.get('backend')})",
        f"output throughput  {_fmt(result.get('output_throughput'))} tok/s",
        f"request throughput {_fmt(result.get('request_throughput'), 3)} req/s",
        *(f"{m.upper()} mean/p50/p90/p99  {_fmt(result.get(f'mean_{m}_ms'))} / "
          + " / ".join(_fmt(result.get(f"p{q}_{m}_ms")) for q in LATENCY_PERCENTILES) + " ms"
          for m in LATENCY_METRICS),
    ]
    if spec.get("acceptance_length") is not None:
        lines.append(f"acceptance length {_fmt(spec['acceptance_length'])} "
                     f"(rate {_fmt(spec.get('acceptance_rate'), 3)})")
    if spec.get("per_position_acceptance"):
        pos = ", ".join(f"{p:.3f}" for p in spec["per_position_acceptance"])
        source = SOURCE_LABELS.get(str(spec.get("per_position_source")), "?")
        lines.append(f"per-position acceptance [{pos}] (from {source})")
    if spec.get("gamma_steps"):
        lines.append(f"vSpec gamma steps {spec['gamma_steps']}")
    return "\n".join(lines)


def pair_table(cmp: PairComparison, acceptance: Mapping[str, Any]) -> str:
    """Markdown table of a pair run: medians [min-max] per arm and the ratio."""
    rows = ["| figure | target-only | vSpec | vSpec / target |", "|---|---|---|---|"]
    for name, (a, b) in cmp.figures.items():
        r = b.median / a.median if a.median else float("nan")
        rows.append(f"| {FIGURE_LABELS.get(name, name)} | {_spread(a)} | {_spread(b)} | "
                    f"{r:.3f} |")
    rows.append("")
    if acceptance.get("acceptance_length") is not None:
        rows.append(f"* acceptance length (vSpec, median over repetitions): "
                    f"{acceptance['acceptance_length']:.3f}")
    if acceptance.get("per_position_acceptance"):
        pos = ", ".join(f"{p:.3f}" for p in acceptance["per_position_acceptance"])
        source = SOURCE_LABELS.get(str(acceptance.get("source")), "?")
        rows.append(f"* per-position acceptance (vSpec, from {source}): [{pos}]")
    if acceptance.get("gamma_steps"):
        rows.append(f"* steps per chosen gamma (vSpec, all repetitions): "
                    f"{acceptance['gamma_steps']}")
    reps = ", ".join(f"{x:.3f}" for x in cmp.rep_speedups)
    verdict = "PASS" if cmp.throughput_passed else "FAIL"
    rows.append(f"* throughput ratio (median vSpec / median target-only): **{cmp.speedup:.3f}x** "
                f"(per repetition: {reps}); threshold {cmp.min_speedup:.2f}x: **{verdict}**")
    for gate in cmp.gates:
        value = "not measured" if gate.value is None else f"{gate.value:.3f}x"
        rows.append(f"* p99 {gate.metric.upper()} ratio (vSpec / target-only, {gate.source}): "
                    f"**{value}** ({_fmt(gate.vspec_ms)} / {_fmt(gate.baseline_ms)} ms); "
                    f"limit {gate.limit:.2f}x: **{'PASS' if gate.passed else 'FAIL'}**")
    if cmp.gates:
        rows.append(f"* verdict (throughput and latency gates): "
                    f"**{'PASS' if cmp.passed else 'FAIL'}**")
    latency = pooled_table(cmp)
    if latency:
        rows += ["", latency]
    return "\n".join(rows)


def pooled_table(cmp: PairComparison) -> str:
    """Markdown table of the latency percentiles pooled over every request of every
    repetition of each arm (empty when an arm has no per-request timings)."""
    base, new = cmp.pooled.get("baseline"), cmp.pooled.get("vspec")
    if not base or not new:
        return ""
    ratios = pooled_ratios(cmp.pooled)
    rows = [f"Latency over every request of all repetitions ({base['requests']:.0f} target-only,"
            f" {new['requests']:.0f} vSpec requests):", "",
            "| figure | target-only | vSpec | vSpec / target |", "|---|---|---|---|"]
    for m in LATENCY_METRICS:
        for q in LATENCY_PERCENTILES:
            key = f"p{q}_{m}_ms"
            rows.append(f"| {FIGURE_LABELS[key]} | {base[key]:.2f} | {new[key]:.2f} | "
                        f"{ratios[key]:.3f} |")
    return "\n".join(rows)


__all__ = ["FIGURE_LABELS", "ProgressLine", "pair_table", "pooled_table", "run_summary"]
