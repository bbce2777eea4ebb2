"""SPEED-Bench report math: per-group figures from per-group counter deltas, and tables.

Each group (a qualitative category or a throughput length bucket) is its own measured
window, so its ``spec`` block already holds that group's counter deltas. Overall figures
are pooled from the summed counters (never averaged ratios), so a large group weighs as
much as its drafts.

Also the labels of the forced-acceptance-length measurement mode, whose results must never
be mistaken for quality-preserving ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm_hust_vspec.bench import metrics
from vllm_hust_vspec.bench.stats import median, ratio

# Latency means pooled over groups, weighted by completed requests.
_WEIGHTED_MEANS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")


def forced_banner(n: int) -> str:
    """The line printed and written with every forced-acceptance result."""
    return (f"*** FORCED ACCEPTANCE LENGTH {n}: MEASUREMENT ONLY, OUTPUTS CHANGED (every "
            f"greedy verify step kept {n} drafts whatever the target said); not a "
            "quality-preserving result ***")


def forced_labels(n: int | None) -> dict[str, Any]:
    """Result-JSON labels of a run (``outputs_changed`` false without a forced length)."""
    return {"outputs_changed": n is not None, "forced_acceptance_length": n}


def acceptance(drafts: float, draft_tokens: float, accepted: float) -> dict[str, float | None]:
    """Acceptance length (1 + accepted / drafts, vLLM's definition), accepted per draft and
    the per-token acceptance rate; None where the denominator is 0."""
    return {
        "acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "accepted_per_draft": accepted / drafts if drafts else None,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
    }


def group_row(group: str, result: Mapping[str, Any], *, rows: int = 0,
              multiturn_rows: int = 0) -> dict[str, Any]:
    """One report row from one group's run result (its own counter window)."""
    spec = result.get("spec") or {}
    done = int(result.get("completed") or 0)
    drafts = float(spec.get("num_drafts") or 0.0)
    draft_tokens = float(spec.get("draft_tokens") or 0.0)
    accepted = float(spec.get("accepted_tokens") or 0.0)
    in_tokens = result.get("total_input_tokens")
    return {
        "group": group,
        "rows": rows,
        "multiturn_rows": multiturn_rows,
        "requests": done,
        "mean_prompt_tokens": float(in_tokens) / done if in_tokens and done else None,
        "output_throughput": result.get("output_throughput"),
        "mean_tpot_ms": result.get("mean_tpot_ms"),
        "mean_ttft_ms": result.get("mean_ttft_ms"),
        "duration": result.get("duration"),
        "total_output_tokens": result.get("total_output_tokens"),
        "num_drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        **acceptance(drafts, draft_tokens, accepted),
    }


def overall_row(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """All groups pooled: summed counters and tokens over summed measured time."""
    drafts = sum(float(r["num_drafts"]) for r in rows)
    draft_tokens = sum(float(r["draft_tokens"]) for r in rows)
    accepted = sum(float(r["accepted_tokens"]) for r in rows)
    tokens = sum(float(r.get("total_output_tokens") or 0.0) for r in rows)
    duration = sum(float(r.get("duration") or 0.0) for r in rows)
    return {
        "group": "all",
        "rows": sum(int(r.get("rows") or 0) for r in rows),
        "multiturn_rows": sum(int(r.get("multiturn_rows") or 0) for r in rows),
        "requests": sum(int(r.get("requests") or 0) for r in rows),
        "output_throughput": tokens / duration if duration else None,
        "num_drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        **acceptance(drafts, draft_tokens, accepted),
    }


def _samples_of(counters: Mapping[str, float]) -> dict[metrics.Sample, float]:
    text = "\n".join(f"{k} {v!r}" for k, v in counters.items())
    return metrics.parse_prometheus(text + "\n")


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run result (the keys ``compare_pair`` reads) from consecutive group runs."""
    done = sum(int(r.get("completed") or 0) for r in results)
    duration = sum(float(r.get("duration") or 0.0) for r in results)
    out: dict[str, Any] = {"completed": done, "failed": sum(int(r.get("failed") or 0)
                                                            for r in results),
                           "duration": duration}
    for key in ("total_input_tokens", "total_output_tokens"):
        out[key] = sum(int(r.get(key) or 0) for r in results)
    if duration:
        out["request_throughput"] = done / duration
        out["output_throughput"] = out["total_output_tokens"] / duration
        out["total_token_throughput"] = (out["total_input_tokens"]
                                         + out["total_output_tokens"]) / duration
    for key in _WEIGHTED_MEANS:
        pairs = [(float(r[key]), int(r.get("completed") or 0)) for r in results if key in r]
        weight = sum(w for _, w in pairs)
        if pairs and weight:
            out[key] = sum(v * w for v, w in pairs) / weight
    window: dict[metrics.Sample, float] = {}
    for r in results:
        for k, v in _samples_of(r.get("spec_counters") or {}).items():
            window[k] = window.get(k, 0.0) + v
    out["spec"] = metrics.spec_figures(window).to_dict()
    out["spec_counters"] = metrics.spec_samples(window)
    return out


def pair_groups(baseline: Sequence[Mapping[str, Any]],
                vspec: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per group: median throughput per arm, their ratio, vSpec acceptance pooled over reps."""
    def rows_by_group(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
        out: dict[str, list[Mapping[str, Any]]] = {}
        for run in runs:
            for row in (run.get("speed_bench") or {}).get("groups") or []:
                out.setdefault(str(row["group"]), []).append(row)
        return out

    base, new = rows_by_group(baseline), rows_by_group(vspec)
    table = []
    for group, new_rows in new.items():
        b_t = [float(r["output_throughput"]) for r in base.get(group, [])
               if r.get("output_throughput") is not None]
        n_t = [float(r["output_throughput"]) for r in new_rows
               if r.get("output_throughput") is not None]
        b_med = median(b_t) if b_t else None
        n_med = median(n_t) if n_t else None
        pooled = overall_row(new_rows)
        table.append({
            "group": group,
            "baseline_output_throughput": b_med,
            "vspec_output_throughput": n_med,
            "speedup": ratio(n_med, b_med) if b_med and n_med else None,
            "num_drafts": pooled["num_drafts"],
            "acceptance_length": pooled["acceptance_length"],
            "accepted_per_draft": pooled["accepted_per_draft"],
            "acceptance_rate": pooled["acceptance_rate"],
        })
    return table


def _f(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def group_table(speed: Mapping[str, Any]) -> str:
    """Markdown table of one run's groups plus the pooled row."""
    key = "category" if speed.get("split") == "qualitative" else "input-length bucket"
    lines = [f"SPEED-Bench {speed.get('split')} ({speed.get('file')}): one measured window "
             "per group, groups run one after another",
             f"| {key} | requests | mean prompt tok | output tok/s | mean TPOT (ms) | drafts | "
             "acceptance length | accepted / draft | acceptance rate |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in [*speed.get("groups", []), speed.get("overall") or {}]:
        if not r:
            continue
        lines.append(
            f"| {r['group']} | {r.get('requests', '-')} | {_f(r.get('mean_prompt_tokens'), 0)} "
            f"| {_f(r.get('output_throughput'))} | {_f(r.get('mean_tpot_ms'))} "
            f"| {_f(r.get('num_drafts'), 0)} | {_f(r.get('acceptance_length'), 3)} "
            f"| {_f(r.get('accepted_per_draft'), 3)} | {_f(r.get('acceptance_rate'), 3)} |")
    if speed.get("multiturn_rows"):
        lines.append(f"* {speed['multiturn_rows']} multi-turn row(s) sent with their first turn "
                     "only")
    return "\n".join(lines)


def pair_group_table(rows: Sequence[Mapping[str, Any]], split: str) -> str:
    """Markdown table of a pair's groups: throughput per arm and vSpec acceptance."""
    key = "category" if split == "qualitative" else "input-length bucket"
    lines = [f"| {key} | target-only tok/s | vSpec tok/s | vSpec / target | "
             "acceptance length | accepted / draft |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['group']} | {_f(r['baseline_output_throughput'])} "
            f"| {_f(r['vspec_output_throughput'])} | {_f(r['speedup'], 3)} "
            f"| {_f(r['acceptance_length'], 3)} | {_f(r['accepted_per_draft'], 3)} |")
    return "\n".join(lines)


__all__ = [
    "acceptance",
    "forced_banner",
    "forced_labels",
    "group_row",
    "group_table",
    "merge_results",
    "overall_row",
    "pair_group_table",
    "pair_groups",
]
