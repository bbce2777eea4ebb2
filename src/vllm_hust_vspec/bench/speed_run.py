"""SPEED-Bench runs: one measured window per category (qualitative) or length bucket.

The acceptance counters are server-wide (``vllm:spec_decode_*`` and ``vspec_*`` on
``/metrics``), so a per-category figure needs that category alone on the server during its
window: the groups run one after another, each through :func:`run_once` (``/metrics``
scraped before and after), and the bench must be the server's only client meanwhile. Only
the first group gets the warm-up; the server is warm for the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.client import Progress
from vllm_hust_vspec.bench.run import LoadConfig, RunOutput, Target, run_once
from vllm_hust_vspec.bench.speed_bench import UNBUCKETED, bucket_for_tokens, load_speed_bench
from vllm_hust_vspec.bench.speed_report import group_row, merge_results, overall_row

ACCEPTANCE_SOURCE = ("server /metrics counter deltas (vllm:spec_decode_*, vspec_*), one "
                     "window per group, groups run one after another")


def _safe(group: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", group) or "group"


def run_speed_bench(
    target: Target,
    load: LoadConfig,
    *,
    backend: str = "auto",
    workdir: Path,
    name: str = "run",
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda _m: None,
    labels: dict[str, Any] | None = None,
) -> RunOutput:
    """Every group of a SPEED-Bench file in turn; writes ``{name}.json`` with the pooled
    figures at the top level and the per-group rows under ``speed_bench``."""
    assert load.dataset_path is not None  # requests_for checked it before anything started
    sb = load_speed_bench(load.dataset_path, load.speed_bench_split)
    groups = sb.groups()
    rows: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    paths: list[str] = []
    for i, (group, members) in enumerate(groups.items()):
        sub = replace(load, speed_bench_split=sb.split, group=group,
                      warmup_prompts=load.warmup_prompts if i == 0 else 0)
        log(f"[{name}] SPEED-Bench {sb.split} group {i + 1}/{len(groups)}: {group} "
            f"({len(members)} rows, {load.num_prompts} requests)")
        out = run_once(target, sub, backend=backend, workdir=workdir,
                       name=f"{name}.{_safe(group)}", progress=progress, log=log)
        results.append(out.result)
        paths.append(str(out.path))
        row = group_row(group, out.result, rows=len(members),
                        multiturn_rows=sum(1 for m in members if m.turns > 1))
        if group == UNBUCKETED and row["mean_prompt_tokens"]:
            # Neither the rows nor the file name say the bucket: name it from what was sent.
            row["group"] = f"~{bucket_for_tokens(row['mean_prompt_tokens'])} (measured)"
        rows.append(row)
    result = merge_results(results)
    result["backend"] = results[0].get("backend")
    result["config"] = {**results[0].get("config", {}), "group": None,
                        "num_prompts_per_group": load.num_prompts}
    result["speed_bench"] = {
        "file": str(sb.path),
        "split": sb.split,
        "groups": rows,
        "overall": overall_row(rows),
        "multiturn_rows": sb.multiturn_rows(),
        "prompt": "first user turn of each row (multi-turn rows: first turn only)",
        "acceptance_source": ACCEPTANCE_SOURCE,
        "group_results": paths,
    }
    if labels:
        result.update(labels)
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return RunOutput(result=result, path=path)


__all__ = ["ACCEPTANCE_SOURCE", "run_speed_bench"]
