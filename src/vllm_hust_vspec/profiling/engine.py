"""Driving the host offline: one in-process vLLM ``LLM`` engine, gamma held fixed per cell.

The engine runs with vSpec's own scheduler hook (``host.apply``) and a controller that
returns the cell's gamma every step, so each step is measured exactly as vSpec serves it:
the interval between consecutive completed steps, as the scheduler consumes them
(``StepFeedback.interval_s``), including draft, verify, sampling and scheduling. Target
and draft time are not separated (whole-step samples): the host does not time them apart
without synchronising the device inside the step.

Gamma 0 uses the ``sticky`` mode (the drafter is skipped), which is what vSpec runs at
gamma 0 in production.
"""

from __future__ import annotations

import gc
import os
import sysconfig
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm_hust_vspec.adaptive.feedback import SettledPolicy, StepFeedback
from vllm_hust_vspec.profiling.grid import CellRun, ProfileGrid

# Prompts come from the Python standard library's own sources: present on every host, from
# an installed wheel as well as from a checkout, and deterministic for a given Python.
PROMPT_SOURCES = ("argparse.py", "textwrap.py", "json/encoder.py", "json/decoder.py",
                  "string.py", "dataclasses.py")


class ConstantGamma(SettledPolicy):
    """Controller that returns ``gamma`` (set per cell) and keeps every feedback."""

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.feedback: list[StepFeedback] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        return self.gamma

    def observe(self, feedback: StepFeedback) -> None:
        self.feedback.append(feedback)

    def snapshot(self) -> dict[str, Any]:
        return {"policy": "profile-constant", "gamma": self.gamma}


@dataclass(frozen=True)
class EngineSpec:
    """The in-process engine: models, speculative config and engine limits."""

    target: str
    speculative_config: dict[str, Any]
    dtype: str = "auto"
    max_model_len: int = 512
    max_num_seqs: int = 8
    max_num_batched_tokens: int | None = None
    compilation_config: dict[str, Any] | None = None
    gpu_memory_utilization: float | None = None
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def llm_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": self.target,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "speculative_config": dict(self.speculative_config),
            "seed": self.seed,
            "disable_log_stats": True,
        }
        if self.compilation_config is None:
            kw["enforce_eager"] = True
        else:
            kw["compilation_config"] = self.compilation_config
        if self.max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.gpu_memory_utilization is not None:
            kw["gpu_memory_utilization"] = self.gpu_memory_utilization
        kw.update(self.extra)
        return kw


def prompt_text(max_chars: int = 400_000) -> str:
    """Deterministic prompt corpus from the standard library sources."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in PROMPT_SOURCES:
        with suppress(OSError):
            parts.append((stdlib / name).read_text(encoding="utf-8"))
    text = "\n".join(parts)
    if not text:  # a stripped Python without sources: still deterministic
        text = " ".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(4000))
    return text[:max_chars]


def prompt_windows(ids: list[int], count: int, length: int, salt: int) -> list[list[int]]:
    """``count`` distinct windows of ``length`` token ids (no shared prefixes across cells)."""
    span = max(len(ids) - length, 1)
    step = max(span // max(count, 1) // 3, 1)
    start = (salt * 7919) % span
    out = []
    for j in range(count):
        o = (start + j * (step + length)) % span
        window = ids[o:o + length]
        if len(window) < length:
            window = (window + ids)[:length]
        out.append(window)
    return out


def measure(
    spec: EngineSpec,
    grid: ProfileGrid,
    settings: Any,
    *,
    log: Callable[[str], None] = lambda _m: None,
    warmup_steps_tokens: int = 16,
) -> tuple[list[CellRun], dict[str, Any]]:
    """Run every grid cell on one engine; returns the cell runs and engine facts."""
    # The hook and the controller must live in this process to be read back.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    from vllm_hust_vspec import host
    from vllm_hust_vspec.host.engine import controller_factory

    ctrl = ConstantGamma(grid.max_gamma)

    def factory(_settings: Any, max_gamma: int) -> ConstantGamma:
        if max_gamma < grid.max_gamma:
            raise ValueError(f"engine max gamma {max_gamma} < grid max {grid.max_gamma}")
        return ctrl

    hook_settings = replace(
        settings, adaptive_speculation=True, adaptive_min_gamma=0, adaptive_policy="online",
        adaptive_profile=None, adaptive_gamma0_mode="sticky", adaptive_refill_batch=1,
        adaptive_trace=None, gamma=grid.max_gamma,
    )
    controller_factory.set_factory(factory)
    host.apply(hook_settings)
    llm: Any = None
    runs: list[CellRun] = []
    facts: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        llm = LLM(**spec.llm_kwargs())
        facts["engine_start_s"] = round(time.perf_counter() - t0, 2)
        tokenizer = llm.get_tokenizer()
        text = prompt_text()
        ids = []
        # Encode in pieces: one long encode trips the tokenizer's max-length warning.
        for i in range(0, len(text), 1500):
            ids.extend(tokenizer.encode(text[i:i + 1500], add_special_tokens=False))
        if len(ids) < grid.prompt_len * 2:
            raise RuntimeError(f"prompt corpus too short for --prompt-len {grid.prompt_len}")

        def params(n: int) -> Any:
            return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

        def run(batch: int, tokens: int, salt: int) -> float:
            prompts = [{"prompt_token_ids": w}
                       for w in prompt_windows(ids, batch, grid.prompt_len, salt)]
            start = time.perf_counter()
            llm.generate(prompts, params(tokens), use_tqdm=False)
            return time.perf_counter() - start

        # Warm-up at every gamma: first steps pay allocator and cache effects.
        for g in sorted(set(grid.gammas)):
            ctrl.gamma = g
            run(max(grid.batch_sizes), warmup_steps_tokens, salt=10_000 + g)
        ctrl.feedback.clear()
        cells = grid.cells()
        for i, cell in enumerate(cells, 1):
            ctrl.gamma = cell.gamma
            mark = len(ctrl.feedback)
            wall = run(cell.batch, cell.output_len, salt=i)
            runs.append(CellRun(cell, ctrl.feedback[mark:], wall))
            log(f"[{i}/{len(cells)}] batch {cell.batch:3d} gamma {cell.gamma} output "
                f"{cell.output_len}: {len(ctrl.feedback) - mark} steps, {wall:.2f} s")
        facts["vllm_config"] = _engine_facts(llm)
    finally:
        if llm is not None:
            with suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
        host.undo()
        controller_factory.set_factory(None)
    return runs, facts


def _engine_facts(llm: Any) -> dict[str, Any]:
    """A few engine settings as the host resolved them (best effort)."""
    out: dict[str, Any] = {}
    with suppress(Exception):
        cfg = llm.llm_engine.vllm_config
        out["dtype"] = str(cfg.model_config.dtype)
        out["max_model_len"] = cfg.model_config.max_model_len
        out["max_num_seqs"] = cfg.scheduler_config.max_num_seqs
        out["max_num_batched_tokens"] = cfg.scheduler_config.max_num_batched_tokens
        out["device"] = str(cfg.device_config.device)
        out["num_speculative_tokens"] = cfg.speculative_config.num_speculative_tokens
        out["speculative_method"] = cfg.speculative_config.method
    return out


__all__ = ["ConstantGamma", "EngineSpec", "measure", "prompt_text", "prompt_windows"]
