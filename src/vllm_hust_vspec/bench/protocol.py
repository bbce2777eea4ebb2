"""The predecessor's ARC-Easy protocol bench: ``vllm-hust-vspec-bench --method draft|eagle``.

It measures a server already started with ``vllm-hust-vspec --protocol arc-easy --method M``
(port 18180) under the fixed protocol load: the materialised ARC-Easy prompts at
``/run_dir/materialized.jsonl``, 200 prompts, 256 output tokens, all sent at once,
temperature 0. The result goes to ``/run_dir/benchmark_results/ARC-Easy-{M}-vspec/
ARC-Easy.json``: ``vllm bench serve``'s result keys (with ``--backend vllm`` every key it
writes; its raw file stays beside it as ``ARC-Easy.vllm-bench.json``) plus vSpec's ``spec``
acceptance figures and the ``config`` sent. The measuring itself is :func:`run_once`, the
same code as ``vllm-hust-vspec-bench run``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vllm_hust_vspec.bench.datasets import DatasetError
from vllm_hust_vspec.bench.run import LoadConfig, Target

PROTOCOL = "arc-easy"
METHODS = ("draft", "eagle")
DEFAULT_DATASET = Path("/run_dir/materialized.jsonl")
DEFAULT_OUTPUT_ROOT = Path("/run_dir/benchmark_results")
RESULT_NAME = "ARC-Easy"  # the file stem: ARC-Easy.json
NUM_PROMPTS = 200
OUTPUT_LEN = 256


def result_dir(output_root: Path, method: str) -> Path:
    """``<root>/ARC-Easy-<method>-vspec``, the predecessor's folder name."""
    return output_root / f"{RESULT_NAME}-{method}-vspec"


def sniff_dataset(path: Path, flag: str = "--dataset-path") -> str:
    """``custom`` when the lines carry ``prompt`` (an already materialised file), else
    ``arc-easy`` (the HF ``ai2_arc`` or original ARC shape); errors name the file and flag."""
    if not path.is_file():
        raise DatasetError(
            f"ARC-Easy dataset {path} not found: materialise it first (the baseline's "
            f"preparation step) or pass {flag} FILE.jsonl"
        )
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line for line in fh if line.strip()), "")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read dataset: {exc.strerror or exc}") from None
    if not first:
        raise DatasetError(f"{path}: no prompts (the file has no non-blank lines); fix {flag}")
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return "custom"  # load_requests reports the line and column
    return "custom" if isinstance(obj, dict) and "prompt" in obj else "arc-easy"


@dataclass(frozen=True)
class ProtocolRun:
    """Everything one protocol bench needs: where to send, what, and where it goes."""

    method: str
    target: Target
    load: LoadConfig
    out_dir: Path

    def notes(self) -> list[str]:
        """Where this run departs from the fixed protocol (so a result is not mistaken)."""
        out = []
        if self.load.num_prompts != NUM_PROMPTS or self.load.output_len != OUTPUT_LEN:
            out.append(
                f"{self.load.num_prompts} prompts x {self.load.output_len} tokens is not the "
                f"ARC-Easy protocol ({NUM_PROMPTS} x {OUTPUT_LEN}); do not compare it with "
                "protocol results"
            )
        return out


def plan_protocol(
    method: str,
    *,
    dataset_path: Path,
    output_root: Path,
    env: Mapping[str, str],
    base_url: str | None = None,
    model: str | None = None,
    tokenizer: str | None = None,
    num_prompts: int = NUM_PROMPTS,
    output_len: int = OUTPUT_LEN,
    warmup_prompts: int = 8,
) -> ProtocolRun:
    """The run for ``--method``: defaults (port, served name, tokenizer) come from the
    ``arc-easy`` preset of that method, so the bench talks to the server the launcher starts."""
    from vllm_hust_vspec.settings import resolve_settings
    from vllm_hust_vspec.settings.sources import protocol_preset

    preset = protocol_preset(PROTOCOL, method)
    s = resolve_settings(preset=preset, env={}).settings  # the preset alone, as served
    dataset = sniff_dataset(dataset_path)
    if tokenizer is None:
        tokenizer = _local_target(s.target_model, env)
    load = LoadConfig(
        dataset=dataset, dataset_path=str(dataset_path), num_prompts=num_prompts,
        output_len=output_len, request_rate=float("inf"), temperature=0.0,
        warmup_prompts=warmup_prompts,
    )
    target = Target(
        base_url=base_url or f"http://127.0.0.1:{s.port}",
        model=model or s.vllm_arg("served_model_name"), tokenizer=tokenizer,
    )
    return ProtocolRun(method=method, target=target, load=load,
                       out_dir=result_dir(output_root, method))


def _local_target(spec: str | None, env: Mapping[str, str]) -> str | None:
    """The preset's target folder when it is found locally (the tokenizer ``vllm bench serve``
    needs); None otherwise, and the caller falls back or asks for --tokenizer."""
    from vllm_hust_vspec.launch.models import ModelNotFoundError, resolve_model

    if not spec:
        return None
    try:
        return resolve_model(spec, "target", env, "--tokenizer")
    except ModelNotFoundError:
        return None


__all__ = [
    "DEFAULT_DATASET",
    "DEFAULT_OUTPUT_ROOT",
    "METHODS",
    "NUM_PROMPTS",
    "OUTPUT_LEN",
    "ProtocolRun",
    "plan_protocol",
    "result_dir",
    "sniff_dataset",
]
