"""Offline profile collection end to end: settings -> engine spec -> measured cells ->
fitted profile -> ``profile.json`` + ``measurements.json``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_hust_vspec._version import __version__
from vllm_hust_vspec.adaptive._files import write_text_atomic
from vllm_hust_vspec.adaptive.fitting import MEASUREMENTS_SCHEMA
from vllm_hust_vspec.launch.command import compilation_config, speculative_config
from vllm_hust_vspec.launch.models import resolve_model
from vllm_hust_vspec.profiling.engine import EngineSpec
from vllm_hust_vspec.profiling.grid import (
    CellRun,
    ProfileGrid,
    ProfileOutcome,
    build_profile,
    cell_samples,
    run_goodput,
    select_median_runs,
)
from vllm_hust_vspec.profiling.provenance import host_versions, machine, model_fingerprint
from vllm_hust_vspec.settings import ResolvedSettings, SettingsError

NEEDS_DRAFT = ("draft", "eagle", "eagle3")


@dataclass(frozen=True)
class ProfilePlan:
    """What will be measured and where the results go."""

    settings: Any
    engine: EngineSpec
    grid: ProfileGrid
    target_path: str
    draft_path: str | None
    profile_path: Path
    measurements_path: Path
    name: str
    hash_weights: bool = True
    context_terms: bool = True

    def describe(self) -> str:
        g = self.grid
        cells = len(g.cells())
        return "\n".join([
            f"engine: {json.dumps(self.engine.llm_kwargs(), sort_keys=True)}",
            f"grid: batch sizes {list(g.batch_sizes)} x gammas {list(g.gammas)} x output "
            f"lengths {list(g.output_lens)}, prompt {g.prompt_len} tokens, {g.repeats} "
            f"repeat(s) = {cells} cells",
            f"writes: {self.profile_path} and {self.measurements_path}",
        ])


def plan_profile(
    resolved: ResolvedSettings,
    env: Mapping[str, str],
    grid: ProfileGrid,
    *,
    out_dir: Path,
    name: str | None = None,
    hash_weights: bool = True,
    context_terms: bool = True,
) -> ProfilePlan:
    """Resolve models and engine limits from the settings (the launcher's model lookup)."""
    from dataclasses import replace

    s = resolved.settings
    if not s.target_model:
        raise SettingsError("no target model: pass --target-model PATH or --protocol PRESET")
    target = resolve_model(s.target_model, "target", env, "--target-model")
    draft = None
    if s.method in NEEDS_DRAFT:
        if not s.draft_model:
            raise SettingsError(f"method {s.method!r} needs --draft-model PATH")
        draft = resolve_model(s.draft_model, "draft", env, "--draft-model")
    max_len = s.vllm_arg("max_model_len") or (
        grid.prompt_len + max(grid.output_lens) + grid.max_gamma + 16)
    grid.validate(max_len)
    s_grid = replace(s, gamma=grid.max_gamma)
    engine = EngineSpec(
        target=target,
        speculative_config=speculative_config(s_grid, draft),
        dtype=s.dtype,
        max_model_len=max_len,
        max_num_seqs=max(grid.batch_sizes),
        max_num_batched_tokens=s.max_num_batched_tokens,
        compilation_config=compilation_config(s_grid),
        gpu_memory_utilization=s.vllm_arg("gpu_memory_utilization"),
    )
    label = name or f"{Path(target).name}-{s.method}-{s.dtype}"
    return ProfilePlan(
        settings=s_grid, engine=engine, grid=grid, target_path=target, draft_path=draft,
        profile_path=out_dir / "profile.json", measurements_path=out_dir / "measurements.json",
        name=label, hash_weights=hash_weights, context_terms=context_terms,
    )


def default_notes(plan: ProfilePlan, mach: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """The profile's ``notes``: what it was measured on and the re-measure warning."""
    host = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "vllm-hust-vspec")
    cpu = mach.get("cpu_model") or mach.get("processor") or mach.get("machine")
    return (
        f"Measured by vllm-hust-vspec-profile {__version__} on {time.strftime('%Y-%m-%d')}: "
        f"target {plan.target_path}, draft {plan.draft_path or '-'} "
        f"({plan.settings.method}), dtype {plan.engine.dtype}, batch sizes "
        f"{list(plan.grid.batch_sizes)}, gammas {list(plan.grid.gammas)}, host {host}, "
        f"{cpu} ({mach.get('usable_cpus', mach.get('cpu_count'))} usable CPUs). Valid only "
        "for this model pair, dtype, batch range and hardware: re-measure for anything else."
    )


def collect(
    plan: ProfilePlan,
    *,
    log: Callable[[str], None] = lambda _m: None,
    runs: list[CellRun] | None = None,
) -> tuple[ProfileOutcome, dict[str, Any]]:
    """Measure (unless ``runs`` are given), fit, and write both files."""
    facts: dict[str, Any] = {}
    started = time.time()
    # Fingerprint before measuring: the files on disk are the ones the engine loads.
    models = {
        "target": model_fingerprint(plan.target_path, weights=plan.hash_weights),
        "draft": (model_fingerprint(plan.draft_path, weights=plan.hash_weights)
                  if plan.draft_path else None),
    }
    if runs is None:
        from vllm_hust_vspec.profiling.engine import measure

        runs, facts = measure(plan.engine, plan.grid, plan.settings, log=log)
    # Fit and goodput use the median repeat of every cell (robust to bursts of foreign load);
    # measurements.json keeps every sample, marked.
    selected = select_median_runs(runs, plan.grid.prompt_len)
    chosen = {id(r) for r in selected}
    samples = [s for r in selected for s in cell_samples(r, plan.grid.prompt_len)]
    all_samples = [{**s, "selected": id(r) in chosen}
                   for r in runs for s in cell_samples(r, plan.grid.prompt_len)]
    feedback = [f for r in runs for f in r.feedback if f.steady and f.gamma > 0]
    versions = host_versions()
    mach = machine()
    outcome = build_profile(
        samples, feedback, plan.grid, max_batch=plan.engine.max_num_seqs, name=plan.name,
        method=plan.engine.speculative_config.get("method", plan.settings.method),
        notes=default_notes(plan, mach, versions), context_terms=plan.context_terms,
    )
    fit = outcome.fit
    measurements = {
        "schema_version": MEASUREMENTS_SCHEMA,
        "tool": f"vllm-hust-vspec-profile {__version__}",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(time.time() - started, 1),
        "host": {"versions": versions, "machine": mach, **facts},
        "models": models,
        "settings": {"method": plan.settings.method, "engine": plan.engine.llm_kwargs(),
                     "grid": plan.grid.to_dict(), "timing": "whole step (scheduler interval)",
                     "selection": "median repeat per (batch, gamma, output_len)",
                     "gamma0_mode": "sticky"},
        "fit": {"mode": fit.mode, "num_samples": fit.num_samples,
                "residual_rmse_s": fit.residual, "relative_residual": fit.relative_residual,
                "max_abs_residual_s": fit.max_abs_residual, "notes": outcome.notes},
        "measured_goodput": [{"batch_size": b, "gamma": g, "tokens_per_s": v}
                             for (b, g), v in sorted(outcome.goodput.items())],
        "best_gamma": {str(b): g for b, g in outcome.best.items()},
        "acceptance_per_position": outcome.acceptance,
        "cells": [{"batch_size": r.cell.batch, "gamma": r.cell.gamma,
                   "output_len": r.cell.output_len, "repeat": r.cell.repeat,
                   "steps": len(r.feedback), "wall_s": r.wall_s,
                   "goodput_tokens_per_s": run_goodput(r, plan.grid.prompt_len),
                   "selected": id(r) in chosen} for r in runs],
        "samples": all_samples,
    }
    write_text_atomic(plan.profile_path, json.dumps(outcome.profile.to_dict(), indent=2) + "\n",
                      make_parents=True)
    write_text_atomic(plan.measurements_path, json.dumps(measurements, indent=1) + "\n",
                      make_parents=True)
    return outcome, measurements


__all__ = ["MEASUREMENTS_SCHEMA", "ProfilePlan", "collect", "default_notes", "plan_profile"]
