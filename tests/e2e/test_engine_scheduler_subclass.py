"""A scheduler subclass (``--scheduler-cls``; vllm-ascend's recompute, profiling-chunk and
load-balancing schedulers) that overrides ``Scheduler.schedule``: vSpec's per-step hook
wraps the override too and runs once per step, and a scheduler that never asks
``dynamic_sd_lookup`` fails closed instead of running a fixed K under an adaptive label."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

MAX_K = 4
TOKENS = 32


class TrimmingController(es.ScriptedController):
    """Gamma 4 every step; verifies a pseudo-random prefix of each request's drafts."""

    def __init__(self, max_gamma: int) -> None:
        super().__init__([MAX_K], max_gamma)
        self.rng = random.Random(3)
        self.asked = 0

    def verify_lengths(self, query: Any) -> list[int]:
        self.asked += 1
        return [self.rng.randint(0, d) for d in query.drafted]


@pytest.mark.parametrize("cls", ["CopiedScheduler", "ExtendingScheduler"])
def test_an_overriding_scheduler_runs_the_hook_once_per_step(cls: str) -> None:
    target = es.model("target")
    expected = es.reference_outputs(target, es.PROMPTS, TOKENS)
    spec = {"method": "draft_model", "model": es.model("draft"),
            "num_speculative_tokens": MAX_K}
    with (
        es.vspec(controller=TrimmingController, method="draft") as built,
        es.engine(target, spec, scheduler_cls=f"_schedulers.{cls}") as llm,
    ):
        got = es.generate(llm, es.PROMPTS, TOKENS)
        scheduler = es.engine_scheduler(llm)
        assert type(scheduler).__name__ == cls
    assert got == expected
    ctrl = built[0]
    trimmed = [fb for fb in ctrl.feedback if fb.gamma == MAX_K and fb.steady
               and sum(fb.drafted) < MAX_K * fb.batch_size]
    assert trimmed, "the per-request lengths never reached the scheduler"
    # once per step: a verify_lengths call per step that had drafts, not two
    drafting = [fb for fb in ctrl.feedback if sum(fb.drafted) or fb.gamma]
    assert ctrl.asked <= len(ctrl.feedback) + 1
    assert ctrl.asked >= len(drafting) - 1


def test_a_scheduler_that_skips_the_lookup_fails_closed() -> None:
    target = es.model("target")
    spec = {"method": "draft_model", "model": es.model("draft"),
            "num_speculative_tokens": MAX_K}
    # with the start-up calibration (the default) its first step finds it: the engine never
    # starts
    with (
        es.vspec(method="draft"),
        pytest.raises(Exception, match="dynamic_sd_lookup"),
        es.engine(target, spec, scheduler_cls="_schedulers.NoLookupScheduler"),
    ):
        pass
    # without one, the first served step
    with (
        es.vspec(method="draft", adaptive_startup="profile"),
        es.engine(target, spec, scheduler_cls="_schedulers.NoLookupScheduler") as llm,
        pytest.raises(Exception, match="dynamic_sd_lookup"),
    ):
        es.generate(llm, es.PROMPTS[:2], 8)
