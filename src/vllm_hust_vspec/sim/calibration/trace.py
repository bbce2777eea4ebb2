"""Re-calibrating an NPU scenario from vSpec's own per-step trace (``--adaptive-trace PATH``).

0.14.3 committed no per-step traces, so ``calibrate-npu`` fits its scenarios to
end-to-end times and windowed rewards through the simulator. A vSpec trace (format:
``adaptive/trace_record.py``, docs/simulator.md) has every completed step's interval, batch,
verified and decided gamma, drafted and accepted tokens and admitted requests, so the same
:class:`~vllm_hust_vspec.sim.host_cost.HostCost` is fitted directly: one non-negative least-squares
row per step (its features against its measured interval, relative residuals), acceptance by the
replay's prefix-acceptance fit. The result is a scenario of the same shape as the shipped ones (the
exact GSM8K workload unless other lengths are given), so the first NPU run of vSpec replaces the
0.14.3-based calibration with one command::

    vllm-hust-vspec-sim calibrate-npu --trace vspec_trace.jsonl --method draft \\
        --write-scenario npu-draft-vspec.json

(the graph capture sizes, refill and limits come from the run's header, which vSpec writes;
flags override them, e.g. for a trace without them).

What a trace cannot give: prompt lengths of admitted requests (``admitted`` x the workload's
mean prompt length is used), and the first (prefill-only) step, which no controller observes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...adaptive.nnls import nnls
from ..host_cost import HOST_COST_TERMS, HostCost
from ..replay import RunSelector, TraceRecord, fit_acceptance, pick_run, read_trace_runs
from ..scenario import parse_scenario

# Coefficients a trace fits (prefill and ingest stay inputs: admitted requests carry no
# prompt lengths, and ingest is collinear with the per-token term within one method).
TRACE_TERMS = ("target_base_ms", "target_per_request_ms", "target_per_token_ms",
               "spec_overhead_ms", "draft_pass_ms", "draft_pass_per_request_ms",
               "admission_ms", "offpath_pass_ms")


@dataclass(frozen=True, slots=True)
class TraceFit:
    """Coefficients fitted on a trace, and how well they explain its steps."""

    cost: HostCost
    acceptance: dict[str, Any]
    steps: int
    rms_relative_error: float
    max_gamma: int


def step_features(rec: TraceRecord, prototype: HostCost, mean_prompt: float,
                  drafting: int | None = None) -> tuple[float, ...]:
    """The host-cost features of one traced step; ``drafting``: requests that drafted after
    it (the next step's batch; None: all of this step's)."""
    decided = 0 if rec.skip else (rec.decided if rec.decided is not None else rec.gamma)
    prefill = int(round(rec.admitted * mean_prompt)) if rec.admitted else (
        0 if rec.steady else int(round(mean_prompt)))
    return prototype.features(rec.batch, rec.drafted, decided,
                              rec.batch if drafting is None else drafting, prefill)


def _drafting(records: list[TraceRecord], i: int) -> int:
    """Requests that drafted after step ``i``: the next step's decoding requests (a trace
    has no count of its own; the last step of a run drafted for nobody)."""
    if i + 1 >= len(records):
        return 0
    rec, nxt = records[i], records[i + 1]
    if rec.step is not None and nxt.step is not None and nxt.step != rec.step + 1:
        return rec.batch
    return nxt.batch


def fit_trace(records: list[TraceRecord], *, capture_sizes: tuple[int, ...] = (),
              native_gammas: tuple[int, ...] = (), mean_prompt: float = 61.0,
              prefill_per_token_ms: float = 0.0) -> TraceFit:
    """Fit :class:`HostCost` and acceptance to a trace's steps (module docstring)."""
    prototype = HostCost(1.0, 0.0, capture_sizes=capture_sizes, native_gammas=native_gammas)
    index = {t: i for i, t in enumerate(HOST_COST_TERMS)}
    terms = [t for t in TRACE_TERMS if t != "offpath_pass_ms" or native_gammas]
    rows: list[list[float]] = []
    rhs: list[float] = []
    used: list[tuple[float, tuple[float, ...]]] = []  # (interval ms, features)
    for i, rec in enumerate(records):
        if rec.interval_s <= 0 or rec.batch <= 0:
            continue
        feats = step_features(rec, prototype, mean_prompt, _drafting(records, i))
        target = rec.interval_s * 1000.0 - prefill_per_token_ms * feats[index[
            "prefill_per_token_ms"]]
        if target <= 0:
            continue
        rows.append([feats[index[t]] / (rec.interval_s * 1000.0) for t in terms])
        rhs.append(target / (rec.interval_s * 1000.0))
        used.append((rec.interval_s * 1000.0, feats))
    if len(rows) < len(terms):
        raise ValueError(f"the trace has {len(rows)} usable steps; at least {len(terms)} "
                         "are needed to fit the step cost")
    # a term whose feature never varies from zero cannot be fitted: leave it out
    live = [j for j in range(len(terms)) if any(r[j] for r in rows)]
    solution = nnls([[r[j] for r in rows] for j in live], rhs)
    values = {t: 0.0 for t in HOST_COST_TERMS}
    for j, v in zip(live, solution, strict=True):
        values[terms[j]] = v
    values["prefill_per_token_ms"] = prefill_per_token_ms
    cost = HostCost(capture_sizes=capture_sizes, native_gammas=native_gammas, **values)
    errors = [(sum(c * f for c, f in zip(cost.coefficients, feats, strict=True)) - ms) / ms
              for ms, feats in used]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
    max_gamma = max((max(r.gamma, r.decided or 0) for r in records), default=1)
    return TraceFit(cost, fit_acceptance(records).model, len(rows), rms, max(1, max_gamma))


def scenario_from_npu_trace(path: str | Path, *, run: RunSelector | None = None,
                            prompt_lengths: tuple[int, ...], output_lengths: tuple[int, ...],
                            capture_sizes: tuple[int, ...] | None = None,
                            native_gammas: tuple[int, ...] = (), refill: int | None = None,
                            max_num_seqs: int | None = None,
                            max_num_batched_tokens: int | None = None,
                            name: str = "npu-from-trace") -> tuple[dict[str, Any], TraceFit]:
    """Fit a trace (one run of it) and build the scenario JSON with the given workload.
    The engine facts left None come from the run's header (vSpec writes them there), else
    0.14.3's B128 host: no graphs, refill 1, 128 requests, 33280 tokens."""
    picked = pick_run(read_trace_runs(path), run, path)
    records = picked.records
    host = picked.host or {}
    if capture_sizes is None:
        capture_sizes = tuple(int(s) for s in host.get("capture_sizes", ()))
    refill = refill if refill is not None else int(host.get("refill", 1))
    max_num_seqs = max_num_seqs or int(host.get("max_num_seqs") or 128)
    max_num_batched_tokens = max_num_batched_tokens or int(
        host.get("max_num_batched_tokens") or 33280)
    fit = fit_trace(records, capture_sizes=capture_sizes, native_gammas=native_gammas,
                    mean_prompt=sum(prompt_lengths) / len(prompt_lengths))
    doc: dict[str, Any] = {
        "schema_version": 1,
        "name": name,
        "description": f"Calibrated from the vSpec trace {Path(path).name} ({fit.steps} "
                       f"steps; step-time RMS error {fit.rms_relative_error:.1%}) by "
                       "vllm-hust-vspec-sim calibrate-npu --trace.",
        "seed": 1,
        "tags": ["stationary", "calibrated", "npu"],
        "min_gamma": 0,
        "max_gamma": fit.max_gamma,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "gamma0": "sticky",
        "refill_batch": refill,
        "workload": {
            "num_requests": len(output_lengths),
            "arrival": {"type": "closed", "concurrency": len(output_lengths)},
            "prompt_len": {"type": "list", "values": list(prompt_lengths)},
            "output_len": {"type": "list", "values": list(output_lengths)},
        },
        "acceptance": fit.acceptance,
        "cost": fit.cost.to_json(),
    }
    parse_scenario(doc, name)
    return doc, fit
