"""Pair mode: the same load against a target-only server and a vSpec server, interleaved.

Repetition *i* starts one server, measures it, stops it, then does the same for the other;
odd repetitions run target-only first, even ones vSpec first (A B B A A B ...). Only one
server runs at a time, so both see the same machine; slow drift (thermal, other tenants)
hits both arms alike, and so does whatever favours a run's position in its repetition (a
machine that slows under a minute of full load favours whichever runs first). Each start gets a
fresh free port, a fresh ``PROMETHEUS_MULTIPROC_DIR`` (so counters of an earlier server are
never summed in) and, for vSpec, its own controller trace file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.report import ProgressLine, pair_table
from vllm_hust_vspec.bench.run import (
    BenchUsageError,
    LoadConfig,
    Target,
    choose_backend,
    run_once,
)
from vllm_hust_vspec.bench.server import (
    PROM_ENV,
    TRACE_ENV,
    ServerProcess,
    baseline_command,
    for_run,
)
from vllm_hust_vspec.bench.speed_report import (
    forced_banner,
    forced_labels,
    pair_group_table,
    pair_groups,
)
from vllm_hust_vspec.bench.speed_run import run_speed_bench
from vllm_hust_vspec.bench.stats import DETAIL_KEYS, PairComparison, compare_pair, median
from vllm_hust_vspec.launch.command import ServeCommand, build_serve_command
from vllm_hust_vspec.launch.models import resolve_model
from vllm_hust_vspec.settings import ResolvedSettings

ARMS = ("baseline", "vspec")
ARM_LABEL = {"baseline": "target-only", "vspec": "vSpec"}


@dataclass(frozen=True)
class PairPlan:
    """Everything a pair run will do (what ``--dry-run`` prints)."""

    commands: dict[str, ServeCommand]  # arm -> server command
    load: LoadConfig
    repetitions: int
    min_speedup: float
    backend: str
    model: str  # served model name
    tokenizer: str  # local target folder
    result_dir: Path
    server_timeout_s: float = 900.0
    # Set only with allow_changed_outputs: the vSpec arm's outputs differ from target-only.
    forced_acceptance_length: int | None = None
    # Latency gates: metric ("ttft", "tpot", "itl") -> most vSpec p99 / target-only p99.
    max_p99_ratios: dict[str, float] = field(default_factory=dict)
    # Keep each vSpec run's controller trace. Off by default: the writer costs the engine
    # time target-only never pays, and a server runs without one unless asked.
    trace: bool = False

    def schedule(self) -> list[tuple[int, str]]:
        """(repetition, arm) in run order: A B B A A B ... (each arm first in every other
        repetition)."""
        return [(rep, arm) for rep in range(1, self.repetitions + 1)
                for arm in (ARMS if rep % 2 else ARMS[::-1])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "commands": {arm: {"argv": c.argv, "env": c.env} for arm, c in self.commands.items()},
            "load": self.load.describe(),
            "repetitions": self.repetitions,
            "min_speedup": self.min_speedup,
            "max_p99_ratios": dict(self.max_p99_ratios),
            "trace": self.trace,
            "backend": self.backend,
            "model": self.model,
            "order": [f"{arm}-r{rep}" for rep, arm in self.schedule()],
            **forced_labels(self.forced_acceptance_length),
        }

    def describe(self) -> str:
        """The commands and schedule, copy-pasteable."""
        out = []
        if self.forced_acceptance_length is not None:
            out.append(f"# {forced_banner(self.forced_acceptance_length)}")
        for arm in ARMS:
            out.append(f"# {ARM_LABEL[arm]} server (port replaced by a free one at each start;"
                       f" {PROM_ENV} per start" + ("; trace per start)" if arm == "vspec"
                                                   and self.trace else ")"))
            out.append(self.commands[arm].to_shell())
        out.append(f"# load per run: {self.load.describe()}")
        out.append(f"# order: {' '.join(f'{arm}-r{rep}' for rep, arm in self.schedule())}")
        gates = "".join(f" and p99 {m.upper()} vSpec/target-only <= {r:.2f}"
                        for m, r in self.max_p99_ratios.items())
        out.append(f"# results: {self.result_dir}; pass if median vSpec/target-only output "
                   f"throughput >= {self.min_speedup:.2f}{gates}")
        return "\n".join(out)


def plan_pair(
    resolved: ResolvedSettings,
    env: Mapping[str, str],
    passthrough: Sequence[str],
    *,
    load: LoadConfig,
    repetitions: int,
    min_speedup: float,
    backend: str,
    result_dir: Path,
    server_timeout_s: float = 900.0,
    allow_changed_outputs: bool = False,
    max_p99_ratios: Mapping[str, float] | None = None,
    trace: bool = False,
) -> PairPlan:
    """Build both server commands from one preset with the launcher's command builder.

    A forced acceptance length (from any settings source) is refused unless
    ``allow_changed_outputs``: it times a chosen acceptance length with changed outputs.
    Latency gates (``max_p99_ratios``) need per-request timings, which a SPEED-Bench run
    (its groups merged into one result) does not keep: refused there.
    """
    if repetitions < 1:
        raise ValueError(f"--repetitions must be >= 1, got {repetitions}")
    gates = dict(max_p99_ratios or {})
    if gates and load.dataset == "speed-bench":
        raise BenchUsageError(
            "the latency gates (--max-ttft/tpot/itl-p99-ratio) need per-request timings, and "
            "--dataset speed-bench merges its groups without them; gate on another dataset")
    s = resolved.settings
    forced = s.forced_acceptance_length
    if forced is not None and not allow_changed_outputs:
        raise BenchUsageError(
            f"forced_acceptance_length is {forced} (--forced-acceptance-length, "
            "HUST_VSPEC_FORCED_ACCEPTANCE_LENGTH or the config): the vSpec arm would keep "
            f"{forced} drafts per step whatever the target says, so its outputs change and the "
            "pair is a timing measurement, not a quality-preserving comparison; add "
            "--allow-changed-outputs to run it anyway (results are labelled outputs_changed)")
    vspec = build_serve_command(resolved, env, passthrough)
    assert s.target_model is not None  # build_serve_command checked it
    target = resolve_model(s.target_model, "target", env, "--target-model")
    return PairPlan(
        commands={"baseline": baseline_command(vspec), "vspec": vspec},
        load=load, repetitions=repetitions, min_speedup=min_speedup,
        backend=choose_backend(backend, Target("", None, target)),
        model=s.vllm_arg("served_model_name") or target, tokenizer=target, result_dir=result_dir,
        server_timeout_s=server_timeout_s, forced_acceptance_length=forced,
        max_p99_ratios=gates, trace=trace,
    )


@dataclass
class PairResult:
    """Results of every run plus the comparison."""

    plan: PairPlan
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # arm -> results
    traces: list[Path] = field(default_factory=list)
    comparison: PairComparison | None = None
    acceptance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        runs = {
            arm: [{k: v for k, v in r.items() if k not in DETAIL_KEYS} for r in results]
            for arm, results in self.runs.items()
        }
        out = {
            **forced_labels(self.plan.forced_acceptance_length),
            "plan": self.plan.to_dict(),
            "runs": runs,
            "traces": [str(p) for p in self.traces],
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "acceptance": self.acceptance,
        }
        if self.plan.load.dataset == "speed-bench":
            out["speed_bench"] = self.speed_bench()
        return out

    def speed_bench(self) -> dict[str, Any]:
        """Per category / bucket: throughput per arm and vSpec acceptance (speed-bench)."""
        first = next((r.get("speed_bench") for r in self.runs.get("vspec", [])), None) or {}
        return {"split": first.get("split"), "file": first.get("file"),
                "groups": pair_groups(self.runs.get("baseline", []),
                                      self.runs.get("vspec", []))}

    def markdown(self) -> str:
        """pair-summary.md: the banner (forced mode), the pair table, the group table."""
        assert self.comparison is not None
        parts = []
        if self.plan.forced_acceptance_length is not None:
            parts.append(forced_banner(self.plan.forced_acceptance_length) + "\n")
        parts.append(pair_table(self.comparison, self.acceptance))
        if self.plan.load.dataset == "speed-bench":
            sb = self.speed_bench()
            parts.append(f"\nSPEED-Bench {sb['split']} per group (medians over repetitions; "
                         "acceptance pooled over the vSpec repetitions):\n")
            parts.append(pair_group_table(sb["groups"], str(sb["split"])))
        return "\n".join(parts)


def aggregate_acceptance(vspec_runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median acceptance length and per-position acceptance over the vSpec repetitions."""
    specs = [r.get("spec") or {} for r in vspec_runs]
    lengths = [s["acceptance_length"] for s in specs if s.get("acceptance_length") is not None]
    per_pos = [s.get("per_position_acceptance") or [] for s in specs]
    width = max((len(p) for p in per_pos), default=0)
    positions = [median([p[k] for p in per_pos if len(p) > k]) for k in range(width)]
    gamma_steps: dict[str, float] = {}
    for s in specs:
        for g, n in (s.get("gamma_steps") or {}).items():
            if n:
                gamma_steps[g] = gamma_steps.get(g, 0.0) + float(n)
    return {
        "acceptance_length": median(lengths) if lengths else None,
        "acceptance_rate": median([s["acceptance_rate"] for s in specs
                                   if s.get("acceptance_rate") is not None]) or None,
        "per_position_acceptance": positions,
        "source": next((s.get("per_position_source") for s in specs
                        if s.get("per_position_source")), ""),
        "gamma_steps": dict(sorted(gamma_steps.items(), key=lambda kv: int(kv[0]))),
    }


def run_pair(plan: PairPlan, progress: ProgressLine | None = None) -> PairResult:
    """Run the schedule; servers are always stopped, even on errors or Ctrl-C."""
    out = PairResult(plan=plan, runs={arm: [] for arm in ARMS})
    prog = progress or ProgressLine(enabled=False)
    plan.result_dir.mkdir(parents=True, exist_ok=True)
    parent_env = dict(os.environ)
    schedule = plan.schedule()
    forced = plan.forced_acceptance_length
    if forced is not None:
        prog.message(forced_banner(forced))
    measure = run_speed_bench if plan.load.dataset == "speed-bench" else run_once
    for i, (rep, arm) in enumerate(schedule, 1):
        name = f"{arm}-r{rep}"
        prom = plan.result_dir / "prometheus" / name
        shutil.rmtree(prom, ignore_errors=True)
        extra = {PROM_ENV: str(prom)}
        if arm == "vspec" and plan.trace:
            trace = plan.result_dir / f"{name}.trace.jsonl"
            trace.unlink(missing_ok=True)
            extra[TRACE_ENV] = str(trace)
            out.traces.append(trace)
        cmd = for_run(plan.commands[arm], None, extra)
        server = ServerProcess(name=name, command=cmd,
                               log_path=plan.result_dir / f"{name}.server.log", any_port=True)
        prog.start(f"{i}/{len(schedule)} {ARM_LABEL[arm]} r{rep}")
        server.start(parent_env)
        try:
            server.wait_ready(plan.server_timeout_s, tick=prog.waiting)
            prog.message(f"[{i}/{len(schedule)}] {ARM_LABEL[arm]} r{rep}: server ready after "
                         f"{server.ready_after_s:.0f} s at {server.base_url}")
            run_out = measure(
                Target(server.base_url, plan.model, plan.tokenizer), plan.load,
                backend=plan.backend, workdir=plan.result_dir, name=name,
                progress=prog.requests, log=prog.message,
            )
        finally:
            server.stop()
        result = run_out.result
        result["arm"] = arm
        result["repetition"] = rep
        result.update(forced_labels(forced if arm == "vspec" else None))
        if run_out.path is not None:  # the per-run file carries the labels too
            run_out.path.write_text(json.dumps(result, indent=1, default=str) + "\n",
                                    encoding="utf-8")
        result["server_ready_s"] = server.ready_after_s
        out.runs[arm].append(result)
        spec = result.get("spec") or {}
        al = spec.get("acceptance_length")
        prog.message(
            f"[{i}/{len(schedule)}] {ARM_LABEL[arm]} r{rep}: "
            f"{result['output_throughput']:.1f} tok/s, TPOT {result['mean_tpot_ms']:.2f} ms, "
            f"TTFT {result['mean_ttft_ms']:.1f} ms"
            + (f" (p99 {result['p99_ttft_ms']:.1f} ms)" if "p99_ttft_ms" in result else "")
            + (f", acceptance length {al:.2f}" if al is not None else "")
        )
    out.comparison = compare_pair(out.runs["baseline"], out.runs["vspec"],
                                  min_speedup=plan.min_speedup,
                                  max_p99_ratios=plan.max_p99_ratios)
    out.acceptance = aggregate_acceptance(out.runs["vspec"])
    (plan.result_dir / "pair-summary.json").write_text(
        json.dumps(out.to_dict(), indent=1, default=str) + "\n", encoding="utf-8")
    (plan.result_dir / "pair-summary.md").write_text(out.markdown() + "\n", encoding="utf-8")
    return out


__all__ = ["ARMS", "PairPlan", "PairResult", "aggregate_acceptance", "plan_pair", "run_pair"]
