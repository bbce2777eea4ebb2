"""SchedulerHook logic on stand-in scheduler objects (fast; no engine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from vllm_hust_vspec.host.vllm import (  # noqa: E402
    REFILL_MAX_HOLD_STEPS,
    SKIP_ATTR,
    GammaLookup,
    SchedulerHook,
)
from vllm_hust_vspec.settings import Settings  # noqa: E402


class Req:
    def __init__(self) -> None:
        self.spec_token_ids: list[int] = []

    def is_finished(self) -> bool:
        return False


class FakeScheduler:
    def __init__(self, running: int, waiting: int, max_active: int = 4) -> None:
        self.requests = {f"r{i}": Req() for i in range(running)}
        self.running = list(self.requests.values())
        self.waiting = [object()] * waiting
        self.max_num_active_reqs = max_active
        self.max_num_scheduled_tokens = 256

    def has_requests(self) -> bool:
        return bool(self.running or self.waiting)


class Ctrl:
    def __init__(self, gamma: int = 2, fail: str = "") -> None:
        self.gamma, self.fail, self.seen = gamma, fail, []

    def decide(self, batch_size: int, token_budget: int) -> int:
        if self.fail == "decide":
            raise ValueError("boom")
        return self.gamma

    def observe(self, feedback: Any) -> None:
        if self.fail == "observe":
            raise ValueError("boom")
        self.seen.append(feedback)

    def snapshot(self) -> dict[str, Any]:
        return {}


def _hook(sched: Any, ctrl: Any, **settings: Any) -> SchedulerHook:
    return SchedulerHook(sched, Settings(**settings), ctrl, 3)


def _out(num: dict[str, int], spec: dict[str, list[int]], new: int = 0) -> Any:
    return SimpleNamespace(
        num_scheduled_tokens=num,
        scheduled_spec_decode_tokens=spec,
        scheduled_new_reqs=[object()] * new,
        num_spec_tokens_to_schedule=3,
        num_invalid_spec_tokens=None,
    )


def test_refill_holds_until_enough_slots_and_never_longer_than_bound() -> None:
    sched = FakeScheduler(running=3, waiting=5)  # 1 free slot, refill 4 -> hold
    hook = _hook(sched, Ctrl(), adaptive_refill_batch=4)
    held = 0
    for _ in range(REFILL_MAX_HOLD_STEPS + 3):
        restore = hook.before_schedule()
        if sched.max_num_active_reqs == 0:
            held += 1
        restore()
        assert sched.max_num_active_reqs == 4
        if not hook._held:
            break
    assert held == REFILL_MAX_HOLD_STEPS  # then released (no starvation)


def test_refill_off_when_queue_empty_or_idle_or_enough_free() -> None:
    for running, waiting in ((3, 0), (0, 5), (0, 0)):
        sched = FakeScheduler(running=running, waiting=waiting)
        hook = _hook(sched, Ctrl(), adaptive_refill_batch=4)
        hook.before_schedule()
        assert sched.max_num_active_reqs == 4
    sched = FakeScheduler(running=2, waiting=2)  # 2 free >= min(4, 2 waiting)
    hook = _hook(sched, Ctrl(), adaptive_refill_batch=4)
    hook.before_schedule()
    assert sched.max_num_active_reqs == 4 and not hook._held


def test_decide_clamps_and_falls_back_once_on_error() -> None:
    sched = FakeScheduler(running=2, waiting=0)
    assert _hook(sched, Ctrl(gamma=99)).decide(2) == 3
    assert _hook(sched, Ctrl(gamma=-4)).decide(2) == 0
    hook = _hook(sched, Ctrl(fail="decide"))
    lookup = GammaLookup(hook, 5)
    assert lookup[2] == 3 and hook.failed
    assert lookup[1] == 3


def test_feedback_counts_decoding_requests_only_and_sticky_marks_skip() -> None:
    sched = FakeScheduler(running=3, waiting=0)
    ctrl = Ctrl(gamma=0)
    hook = _hook(sched, ctrl, adaptive_gamma0_mode="sticky")
    hook.before_schedule()
    hook.decide(3)
    # r0, r1 decode with 2 drafts each; r2 finished a 7-token prefill chunk.
    out = _out({"r0": 3, "r1": 3, "r2": 7}, {"r0": [5, 6], "r1": [7, 8]})
    hook.after_schedule(out)
    assert getattr(out, SKIP_ATTR) is True
    assert hook.tainted == {"r0", "r1", "r2"} and hook.cohort == hook.tainted
    runner_out = SimpleNamespace(
        sampled_token_ids=[[1, 2, 3], [4], [9]], req_id_to_index={"r0": 0, "r1": 1, "r2": 2}
    )
    hook.on_update(out, runner_out)()
    (fb,) = ctrl.seen
    assert fb.drafted == (2, 2) and fb.accepted == (2, 0)
    assert fb.committed == 4 and fb.batch_size == 2 and fb.gamma == 3 and fb.steady is False
    assert fb.accept_flags == ((True, True), (False, False))
    # While the cohort lives gamma stays 0 whatever the controller says; drafts are dropped.
    ctrl.gamma = 3
    sched.requests["r0"].spec_token_ids = [1, 2, 3]
    hook.before_schedule()
    assert sched.requests["r0"].spec_token_ids == []
    assert hook.decide(3) == 0
    del sched.requests["r0"], sched.requests["r1"], sched.requests["r2"]
    assert hook.decide(3) == 3


def test_observe_failure_switches_to_fixed_gamma() -> None:
    sched = FakeScheduler(running=1, waiting=0)
    hook = _hook(sched, Ctrl(fail="observe"))
    hook.decide(1)
    out = _out({"r0": 1}, {})
    hook.after_schedule(out)
    hook.on_update(out, SimpleNamespace(sampled_token_ids=[[1]], req_id_to_index={"r0": 0}))()
    assert hook.failed
    assert hook.decide(1) == 3
