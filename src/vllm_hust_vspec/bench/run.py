"""One measured load against a running server: warm-up, metrics scrape, load, scrape, result.

The result is one JSON-able dict: ``vllm bench serve``'s figures (``output_throughput``,
``mean_tpot_ms``, ``median_ttft_ms``, ...), ``spec`` (acceptance over the measured window
from ``/metrics``), ``config`` (what was sent) and ``requests`` (per-request raw numbers,
built-in backend only).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench import metrics, vllm_cli
from vllm_hust_vspec.bench.client import LoadSpec, Progress, first_model, run_load
from vllm_hust_vspec.bench.datasets import (
    BenchRequest,
    DatasetError,
    load_requests,
    write_custom_jsonl,
)
from vllm_hust_vspec.bench.speed_bench import group_requests, load_speed_bench
from vllm_hust_vspec.bench.stats import LATENCY_PERCENTILES, summarize_requests

BACKENDS = ("auto", "builtin", "vllm")


class BenchError(RuntimeError):
    """A benchmark run failed; the message says which step and why."""


class BenchUsageError(ValueError):
    """The benchmark was asked for something it cannot do (bad option combination)."""


@dataclass(frozen=True)
class LoadConfig:
    """The load of one run (the same for every run of a pair)."""

    dataset: str = "random"
    dataset_path: str | None = None
    num_prompts: int = 200
    output_len: int = 256
    input_len: int = 128
    request_rate: float = float("inf")
    max_concurrency: int | None = None
    temperature: float = 0.0
    seed: int = 0
    ignore_eos: bool = True
    shuffle: bool = False
    warmup_prompts: int = 8
    warmup_output_len: int = 32
    speed_bench_split: str | None = None  # speed-bench: qualitative | throughput | None: guess
    group: str | None = None  # speed-bench: only this category / bucket (one measured window)

    def describe(self) -> str:
        """One line for logs and docs."""
        src = self.dataset + (f" ({self.dataset_path})" if self.dataset_path else "")
        if self.dataset == "speed-bench":
            src += (f", split {self.speed_bench_split or 'auto'}, "
                    + (f"group {self.group}" if self.group else "per group, groups in turn"))
        rate = "unlimited" if self.request_rate == float("inf") else f"{self.request_rate:g}/s"
        conc = self.max_concurrency or "unlimited"
        return (f"{self.num_prompts} prompts x {self.output_len} output tokens from {src}, "
                f"rate {rate}, concurrency {conc}, temperature {self.temperature:g}, "
                f"warm-up {self.warmup_prompts} x {self.warmup_output_len}")


@dataclass(frozen=True)
class Target:
    """Where to send the load."""

    base_url: str
    model: str | None = None  # served model name; None: first model the server lists
    tokenizer: str | None = None  # local tokenizer path (vllm backend only)


@dataclass
class RunOutput:
    """What one run produced."""

    result: dict[str, Any]
    path: Path | None = None
    commands: list[list[str]] = field(default_factory=list)


def requests_for(load: LoadConfig) -> list[BenchRequest]:
    """The measured prompts of a load (for speed-bench with a group: that group's)."""
    if load.dataset == "speed-bench":  # the whole file is checked, not just the first rows
        if load.dataset_path is None:
            raise DatasetError("dataset 'speed-bench' needs --dataset-path FILE.jsonl (a local "
                               "SPEED-Bench export; see docs/benchmarks.md)")
        sb = load_speed_bench(load.dataset_path, load.speed_bench_split)
        groups = sb.groups()
        if load.group is None:
            return group_requests(sb.rows, num_prompts=load.num_prompts,
                                  output_tokens=load.output_len, shuffle=load.shuffle,
                                  seed=load.seed)
        if load.group not in groups:
            raise DatasetError(f"{load.dataset_path}: no rows in group {load.group!r} "
                               f"(groups: {', '.join(groups)})")
        return group_requests(groups[load.group], num_prompts=load.num_prompts,
                              output_tokens=load.output_len, shuffle=load.shuffle,
                              seed=load.seed)
    return load_requests(
        load.dataset, load.dataset_path, num_prompts=load.num_prompts,
        output_tokens=load.output_len, seed=load.seed, input_len=load.input_len,
        shuffle=load.shuffle,
    )


def choose_backend(backend: str, target: Target) -> str:
    """``auto``: vLLM's own ``bench serve`` when it is importable and a tokenizer is known,
    else the built-in client."""
    if backend not in BACKENDS:
        raise BenchUsageError(f"unknown --backend {backend!r} (one of: {', '.join(BACKENDS)})")
    if backend != "auto":
        if backend == "vllm" and not target.tokenizer:
            raise BenchUsageError(
                "--backend vllm needs --tokenizer PATH (a local tokenizer folder)")
        return backend
    if target.tokenizer and vllm_cli.vllm_bench_available():
        return "vllm"
    return "builtin"


def warm_up(target: Target, model: str, load: LoadConfig, reqs: list[BenchRequest]) -> None:
    """A few short requests so the first measured ones do not pay one-time costs."""
    if load.warmup_prompts <= 0:
        return
    warm = [replace(r, output_tokens=min(r.output_tokens, load.warmup_output_len))
            for r in reqs[: load.warmup_prompts]]
    spec = LoadSpec(base_url=target.base_url, model=model, temperature=load.temperature,
                    ignore_eos=load.ignore_eos, seed=load.seed)
    outcomes, _ = run_load(spec, warm)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise BenchError(f"warm-up against {target.base_url} failed: {failed[0].error}")


def vllm_command(
    target: Target, model: str, load: LoadConfig, workdir: Path, name: str
) -> tuple[list[str], Path, Path | None]:
    """argv of the ``vllm bench serve`` run, its result path and the prompt file it reads."""
    data_path: Path | None = None
    if load.dataset != "random":
        data_path = workdir / f"{name}.prompts.jsonl"
    args = vllm_cli.VllmBenchArgs(
        base_url=target.base_url, served_model_name=model, tokenizer=target.tokenizer or "",
        dataset="random" if load.dataset == "random" else "custom",
        dataset_path=str(data_path) if data_path else None, num_prompts=load.num_prompts,
        output_len=load.output_len, input_len=load.input_len, request_rate=load.request_rate,
        max_concurrency=load.max_concurrency, temperature=load.temperature, seed=load.seed,
        ignore_eos=load.ignore_eos, result_dir=str(workdir),
        result_filename=f"{name}.vllm-bench.json",
    )
    return vllm_cli.bench_argv(args), workdir / args.result_filename, data_path


def run_once(
    target: Target,
    load: LoadConfig,
    *,
    backend: str = "auto",
    workdir: Path,
    name: str = "run",
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> RunOutput:
    """Warm up, scrape /metrics, send the load, scrape again; write ``{name}.json``."""
    workdir.mkdir(parents=True, exist_ok=True)
    backend = choose_backend(backend, target)
    reqs = requests_for(load)
    model = target.model or first_model(target.base_url)
    warm_up(target, model, load, reqs)
    before = metrics.scrape(target.base_url)
    commands: list[list[str]] = []
    requests_raw: list[dict[str, Any]] = []
    if backend == "builtin":
        spec = LoadSpec(base_url=target.base_url, model=model, temperature=load.temperature,
                        request_rate=load.request_rate, max_concurrency=load.max_concurrency,
                        ignore_eos=load.ignore_eos, seed=load.seed)
        outcomes, duration = run_load(spec, reqs, progress)
        result = summarize_requests(outcomes, duration, percentiles=LATENCY_PERCENTILES)
        errors = sorted({o.error for o in outcomes if not o.ok})
        if errors:
            result["errors"] = errors[:5]
        requests_raw = [asdict(o) for o in outcomes]
    else:
        argv, result_path, data_path = vllm_command(target, model, load, workdir, name)
        if data_path is not None:
            write_custom_jsonl(reqs, data_path)
        commands.append(argv)
        log(f"running vllm bench serve ({name}); output in {workdir / (name + '.vllm-bench.log')}")
        with (workdir / f"{name}.vllm-bench.log").open("w") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise BenchError(
                f"vllm bench serve exited with {proc.returncode}; see "
                f"{workdir / (name + '.vllm-bench.log')}"
            )
        result = vllm_cli.load_result(result_path)
    after = metrics.scrape(target.base_url)
    window = metrics.diff(after, before)
    result["spec"] = metrics.spec_figures(window).to_dict()
    result["spec_counters"] = metrics.spec_samples(window)
    result["backend"] = backend
    result["config"] = {**asdict(load), "base_url": target.base_url, "model": model,
                        "request_rate": str(load.request_rate), "finished_at": time.time()}
    if requests_raw:
        result["requests"] = requests_raw
    if result.get("completed", 0) == 0:
        raise BenchError(
            f"no request completed against {target.base_url}: "
            f"{(result.get('errors') or ['see the server log'])[0]}"
        )
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return RunOutput(result=result, path=path, commands=commands)


__all__ = [
    "BACKENDS",
    "BenchError",
    "BenchUsageError",
    "LoadConfig",
    "RunOutput",
    "Target",
    "choose_backend",
    "requests_for",
    "run_once",
]
