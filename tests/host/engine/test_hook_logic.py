"""SchedulerHook logic on stand-in scheduler objects (fast; no engine)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from vllm_hust_vspec.adaptive.admission import REFILL_MAX_HOLD_STEPS  # noqa: E402
from vllm_hust_vspec.adaptive.feedback import ControllerSnapshot, StepFeedback  # noqa: E402
from vllm_hust_vspec.host.engine.scheduler import (  # noqa: E402
    HOOK_ATTR,
    GammaLookup,
    SchedulerHook,
    _make_schedule_wrapper,
)
from vllm_hust_vspec.host.wire import SKIP_ATTR  # noqa: E402
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
        self.finished_req_ids: set[str] = set()

    def finish(self, *ids: str) -> None:
        """What vLLM's _free_request does: forget the request, remember it finished."""
        for rid in ids:
            del self.requests[rid]
        self.finished_req_ids |= set(ids)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running or self.waiting)


class Ctrl:
    def __init__(self, gamma: int = 2, fail: str = "") -> None:
        self.gamma, self.fail, self.seen = gamma, fail, []
        self.decisions = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        self.decisions += 1
        if self.fail == "decide":
            raise ValueError("boom")
        return self.gamma

    def observe(self, feedback: Any) -> None:
        if self.fail == "observe":
            raise ValueError("boom")
        self.seen.append(feedback)

    def settled(self) -> bool:
        return True

    def report(self) -> ControllerSnapshot:
        return ControllerSnapshot("ctrl", self.gamma,
                                  {self.gamma: 100.0 * len(self.seen)} if self.seen else {})

    def snapshot(self) -> dict[str, Any]:
        return {"policy": "ctrl", "gamma": self.gamma}


def _hook(sched: Any, ctrl: Any, **settings: Any) -> SchedulerHook:
    return SchedulerHook(sched, Settings(**settings), ctrl, 3)


def _before_schedule(hook: SchedulerHook) -> None:
    """What happens around schedule() when the scheduler itself does nothing."""
    with hook.scheduling():
        pass


def _out(num: dict[str, int], spec: dict[str, list[int]], new: int = 0) -> Any:
    return SimpleNamespace(
        num_scheduled_tokens=num,
        total_num_scheduled_tokens=sum(num.values()),
        scheduled_spec_decode_tokens=spec,
        scheduled_new_reqs=[object()] * new,
        num_spec_tokens_to_schedule=3,
        num_invalid_spec_tokens=None,
    )


def test_refill_holds_until_enough_slots_and_never_longer_than_bound() -> None:
    sched = FakeScheduler(running=3, waiting=5)  # 1 free slot, refill 4 -> hold
    hook = _hook(sched, Ctrl(), adaptive_refill_batch=4, adaptive_refill_hold="speculating")
    held = 0
    for _ in range(REFILL_MAX_HOLD_STEPS + 3):
        with hook.scheduling():
            if sched.max_num_active_reqs == len(sched.running):  # no free slot while held
                held += 1
        assert sched.max_num_active_reqs == 4
        if not hook.refill.held:
            break
    assert held == REFILL_MAX_HOLD_STEPS  # then released (no starvation)


def test_no_refill_hold_while_a_sticky_zero_is_pinned() -> None:
    sched = FakeScheduler(running=3, waiting=5)  # 1 free slot, refill 4: would hold
    hook = _hook(sched, Ctrl(gamma=0), adaptive_refill_batch=4, adaptive_gamma0_mode="sticky",
                 adaptive_refill_hold="speculating")
    hook.sticky.skip({"r0": 1, "r1": 1, "r2": 1})  # a pinned cohort: speculation is off
    with hook.scheduling():
        assert sched.max_num_active_reqs == 4 and not hook.refill.held
    hook.sticky.members.clear()  # the cohort ended: holding forms the next one again
    with hook.scheduling():
        assert sched.max_num_active_reqs == 3 and hook.refill.held


def test_an_exception_inside_the_hold_cannot_leave_admissions_at_zero() -> None:
    sched = FakeScheduler(running=3, waiting=5)
    hook = _hook(sched, Ctrl(), adaptive_refill_batch=4, adaptive_refill_hold="speculating")
    setattr(sched, HOOK_ATTR, hook)
    seen: list[int] = []

    def failing_schedule(self: Any) -> Any:
        seen.append(self.max_num_active_reqs)
        raise RuntimeError("schedule() failed inside the hold")

    with pytest.raises(RuntimeError, match="inside the hold"):
        _make_schedule_wrapper(failing_schedule)(sched)
    assert seen == [3]  # the hold was in force when schedule() ran: no slot free
    assert sched.max_num_active_reqs == 4  # and is gone although schedule() raised


def test_auto_refill_learns_what_admitting_costs_and_then_holds_even_when_pinned() -> None:
    sched = FakeScheduler(running=3, waiting=5)  # 1 free slot, refill 4: would hold
    hook = _hook(sched, Ctrl(gamma=0), adaptive_refill_batch=4, adaptive_gamma0_mode="sticky")
    assert hook.settings.adaptive_refill_hold == "auto"
    with hook.scheduling():
        assert not hook.refill.held  # nothing measured: admit as the host does
    # the hook measures prompt tokens from the scheduler output: r2's 7-token chunk
    rule = hook.refill.rule
    seen: list[StepFeedback] = []
    hook.refill.rule = SimpleNamespace(  # type: ignore[assignment]
        observe=seen.append, decide=rule.decide, batch=rule.batch)
    out = _out({"r0": 1, "r1": 1, "r2": 7}, {}, new=1)
    hook.decide(3)
    hook.after_schedule(out)
    hook.on_update(out, SimpleNamespace(sampled_token_ids=[[1], [2], [3]],
                                        req_id_to_index={"r0": 0, "r1": 1, "r2": 2}))(False)
    (fb,) = seen
    assert fb.batch_size == 2 and fb.prefill_tokens == 7  # two decodes, r2's 7 prompt tokens
    hook.refill.rule = rule
    cost = hook.refill.rule.cost
    assert cost is not None and rule.snapshot()["admitting_steps"] == 0  # no steady reference
    hook.sticky.members.clear()
    hook.sticky.tainted.clear()
    # steps whose admissions cost a fixed 200 ms beside their prompts' work
    for i in range(40):
        for seconds, prompt in ((0.010, 0), (0.010 + 0.200 + 0.0001 * (20 + 7 * i), 20 + 7 * i)):
            rule.observe(StepFeedback(
                batch_size=3, gamma=0, drafted=(0,) * 3, accepted=(0,) * 3, committed=3,
                interval_s=seconds, token_budget=64, steady=not prompt, drafter_ran=False,
                next_gamma=0, prefill_tokens=prompt))
    hook.sticky.skip({"r0": 1, "r1": 1, "r2": 1})  # a pinned zero: speculation is off
    with hook.scheduling():
        assert hook.refill.held and sched.max_num_active_reqs == 3
    assert sched.max_num_active_reqs == 4


def test_refill_off_when_queue_empty_or_idle_or_enough_free() -> None:
    for running, waiting in ((3, 0), (0, 5), (0, 0)):
        sched = FakeScheduler(running=running, waiting=waiting)
        hook = _hook(sched, Ctrl(), adaptive_refill_batch=4)
        with hook.scheduling():
            assert sched.max_num_active_reqs == 4
    sched = FakeScheduler(running=2, waiting=2)  # 2 free >= min(4, 2 waiting)
    hook = _hook(sched, Ctrl(), adaptive_refill_batch=4)
    with hook.scheduling():
        assert sched.max_num_active_reqs == 4 and not hook.refill.held


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
    _before_schedule(hook)
    hook.decide(3)
    # r0, r1 decode with 2 drafts each; r2 finished a 7-token prefill chunk.
    out = _out({"r0": 3, "r1": 3, "r2": 7}, {"r0": [5, 6], "r1": [7, 8]})
    hook.after_schedule(out)
    assert getattr(out, SKIP_ATTR) is True
    assert hook.sticky.tainted == {"r0", "r1", "r2"} and hook.sticky.members == hook.sticky.tainted
    runner_out = SimpleNamespace(
        sampled_token_ids=[[1, 2, 3], [4], [9]], req_id_to_index={"r0": 0, "r1": 1, "r2": 2}
    )
    hook.on_update(out, runner_out)(False)
    (fb,) = ctrl.seen
    assert fb.drafted == (2, 2) and fb.accepted == (2, 0)
    assert fb.committed == 4 and fb.batch_size == 2 and fb.gamma == 3 and fb.steady is False
    assert fb.next_gamma == 0 and fb.drafter_ran is False
    # While the cohort lives gamma stays 0 whatever the controller says; drafts are dropped.
    ctrl.gamma = 3
    sched.requests["r0"].spec_token_ids = [1, 2, 3]
    _before_schedule(hook)
    assert sched.requests["r0"].spec_token_ids == []
    asked = ctrl.decisions
    assert hook.decide(3) == 0
    assert ctrl.decisions == asked  # a pinned cohort does not consult the controller
    sched.finish("r0", "r1")
    _before_schedule(hook)
    assert hook.decide(3) == 0  # r2 still runs: the cohort is pinned until its last request
    assert hook.sticky.members == {"r2"}
    sched.finish("r2")
    _before_schedule(hook)
    assert hook.decide(3) == 3 and not hook.sticky.tainted


def test_step_counts_without_drafts_match_the_general_count() -> None:
    # a step with no drafts scheduled takes the short path; it must count as the general
    # path counts a step whose requests all drafted nothing
    from vllm_hust_vspec.host.engine.hook import step_counts

    num = {"r0": 1, "r1": 1, "r2": 7, "r3": 1, "r4": 1}  # r2 a prefill chunk, r4 aborted
    runner_out = SimpleNamespace(sampled_token_ids=[[1], [4], [9], [], [2]],
                                 req_id_to_index={"r0": 0, "r1": 1, "r2": 2, "r3": 3})
    short = step_counts(_out(num, {}), runner_out)
    general = step_counts(_out(num, {"r0": [], "r1": [], "r3": []}), runner_out)
    assert short == general == ((0, 0), (0, 0), 3, ("r0", "r1"))
    assert step_counts(_out({}, {}), SimpleNamespace(sampled_token_ids=[],
                                                     req_id_to_index={})) == ((), (), 0, ())


def test_observe_failure_switches_to_fixed_gamma() -> None:
    sched = FakeScheduler(running=1, waiting=0)
    hook = _hook(sched, Ctrl(fail="observe"))
    hook.decide(1)
    out = _out({"r0": 1}, {})
    hook.after_schedule(out)
    hook.on_update(out, SimpleNamespace(sampled_token_ids=[[1]], req_id_to_index={"r0": 0}))(False)
    assert hook.failed
    assert hook.decide(1) == 3


def test_metrics_are_buffered_then_exact_once_the_engine_is_idle(tmp_path: Any) -> None:
    from prometheus_client import CollectorRegistry

    from vllm_hust_vspec.host.engine.metrics import make_metrics
    from vllm_hust_vspec.host.engine.trace import TraceWriter

    registry = CollectorRegistry()
    sched = FakeScheduler(running=2, waiting=0)
    trace = TraceWriter(tmp_path / "trace.jsonl")
    hook = SchedulerHook(sched, Settings(), Ctrl(gamma=2), 3, metrics=make_metrics(registry),
                         trace=trace)

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    def step(drafts: dict[str, list[int]], sampled: list[list[int]]) -> None:
        _before_schedule(hook)
        hook.decide(2)
        out = _out({rid: 1 + len(d) for rid, d in drafts.items()}, drafts)
        hook.after_schedule(out)
        hook.end_update(hook.on_update(out, SimpleNamespace(
            sampled_token_ids=sampled, req_id_to_index={"r0": 0, "r1": 1})))
        hook.settle()  # what the next step's get_grammar_bitmask does

    # Until the controller has an estimate to publish, every step flushes (so a short run
    # still shows its arms); the first feedback gives one here.
    step({"r0": [], "r1": []}, [[1], [2]])
    assert value("vspec_gamma_steps_total", gamma="2") == 1
    assert value("vspec_arm_reward_tokens_per_second", gamma="2") == 100.0
    for _ in range(3):  # r0 accepts 2 of 2 drafts, r1 none
        step({"r0": [5, 6], "r1": [7, 8]}, [[5, 6, 9], [3]])
    # buffered: not pushed yet while requests are running
    assert value("vspec_gamma_steps_total", gamma="2") == 1
    assert value("vspec_draft_tokens_per_pos_total", position="0") == 0
    assert len(trace._pending) == 4  # trace records wait for a full batch too
    sched.running = []  # the engine goes idle: the next finished step flushes everything
    step({"r0": [5, 6], "r1": [7, 8]}, [[5, 6, 9], [3]])
    assert value("vspec_gamma_steps_total", gamma="2") == 5
    assert value("vspec_draft_tokens_per_pos_total", position="0") == 8
    assert value("vspec_draft_tokens_per_pos_total", position="1") == 8
    assert value("vspec_accepted_tokens_per_pos_total", position="0") == 4
    assert value("vspec_accepted_tokens_per_pos_total", position="1") == 4
    assert value("vspec_committed_tokens_total") == 2 + 4 * 4
    assert value("vspec_gamma") == 2
    assert value("vspec_arm_reward_tokens_per_second", gamma="2") == 500.0
    assert trace._pending == []  # handed to the writer when the engine went idle
    hook.close()
    assert len((tmp_path / "trace.jsonl").read_text().splitlines()) == 5


def test_requests_admitted_while_the_drafter_was_off_do_not_bring_it_back() -> None:
    sched = FakeScheduler(running=2, waiting=0)
    for rid, req in sched.requests.items():
        req.request_id = rid
    ctrl = Ctrl(gamma=0)
    hook = _hook(sched, ctrl, adaptive_gamma0_mode="sticky", adaptive_refill_batch=4)
    _before_schedule(hook)
    hook.decide(2)
    hook.after_schedule(_out({"r0": 1, "r1": 1}, {}))  # pins {r0, r1}
    admitted = Req()
    admitted.request_id = "r2"
    sched.requests["r2"] = admitted
    sched.running.append(admitted)
    _before_schedule(hook)
    hook.decide(3)
    hook.after_schedule(_out({"r0": 1, "r1": 1, "r2": 1}, {}))  # r2 admitted during the pin
    sched.finish("r0", "r1")
    sched.running = [admitted]
    ctrl.gamma = 3
    sched.waiting = [object()] * 5  # 3 free slots < refill 4: a speculating host would hold
    _before_schedule(hook)
    assert not hook.sticky.pinned()
    assert not hook.refill.held  # nothing can speculate: admissions are not held
    sched.waiting = []
    assert hook.decide(1) == 3  # the controller is asked again ...
    out = _out({"r2": 1}, {})
    hook.after_schedule(out)
    # ... but r2's draft KV has holes: the drafter stays off, the step runs gamma 0
    assert getattr(out, SKIP_ATTR) is True
    assert hook.last_decided == 0 and not hook.sticky.pinned()  # no new cohort pinned
    fresh = Req()
    fresh.request_id = "r3"
    sched.requests["r3"] = fresh
    sched.running.append(fresh)
    _before_schedule(hook)
    hook.decide(2)
    out = _out({"r2": 1, "r3": 1}, {})
    hook.after_schedule(out)
    assert not getattr(out, SKIP_ATTR, False) and hook.last_decided == 3  # r3 may draft


class LengthCtrl(Ctrl):
    """Verifies one draft fewer for every second request, asks two more than drafted for
    the third (clamped by the hook), and records the queries."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(3)
        self.queries: list[Any] = []
        self.raise_ = fail

    def verify_lengths(self, query: Any) -> list[int]:
        self.queries.append(query)
        if self.raise_:
            raise ValueError("boom")
        return [d - (i % 2) + (2 if i == 2 else 0) for i, d in enumerate(query.drafted)]


def _drafting(running: int, drafts: list[int]) -> FakeScheduler:
    """A scheduler whose running requests r0, r1, ... each hold ``drafts``."""
    sched = FakeScheduler(running=running, waiting=0)
    for i, r in enumerate(sched.running):
        r.request_id = f"r{i}"
        r.spec_token_ids = list(drafts)
    return sched


def test_per_request_lengths_trim_each_request_drafts_before_scheduling() -> None:
    sched = _drafting(4, [7, 8, 9])
    sched.running[3].spec_token_ids = []  # nothing drafted: not asked about
    ctrl = LengthCtrl()
    hook = _hook(sched, ctrl)
    with hook.scheduling():
        pass
    assert [r.spec_token_ids for r in sched.running] == [[7, 8, 9], [7, 8], [7, 8, 9], []]
    q = ctrl.queries[0]
    assert q.request_ids == ("r0", "r1", "r2") and q.drafted == (3, 3, 3)
    assert hook._lengths == (2, 3, 3)


class KeepAll(LengthCtrl):
    def verify_lengths(self, query: Any) -> list[int]:
        return list(query.drafted)


@pytest.mark.parametrize(("ctrl_type", "trimmed"), [(LengthCtrl, True), (KeepAll, False)])
def test_feedback_of_a_step_says_whether_its_lengths_were_trimmed(
        ctrl_type: type[LengthCtrl], trimmed: bool) -> None:
    # the batch controller's acceptance counts leave trimmed steps out (a biased sample)
    sched = _drafting(2, [7, 8, 9])
    ctrl = ctrl_type()
    hook = _hook(sched, ctrl)
    _before_schedule(hook)
    hook.decide(2)
    spec = {r.request_id: list(r.spec_token_ids) for r in sched.running}
    out = _out({rid: 1 + len(d) for rid, d in spec.items()}, spec)
    hook.after_schedule(out)
    hook.on_update(out, SimpleNamespace(sampled_token_ids=[[1], [2]],
                                        req_id_to_index={"r0": 0, "r1": 1}))(False)
    (fb,) = ctrl.seen
    assert fb.lengths_trimmed is trimmed
    assert fb.drafted == ((3, 2) if trimmed else (3, 3))


def test_a_failing_length_policy_falls_back_and_verifies_everything() -> None:
    sched = _drafting(2, [7, 8, 9])
    hook = _hook(sched, LengthCtrl(fail=True))
    with hook.scheduling():
        pass
    assert [r.spec_token_ids for r in sched.running] == [[7, 8, 9], [7, 8, 9]]
    assert hook.failed  # the fixed upper bound rules from now on


def test_no_lengths_asked_while_a_sticky_cohort_is_pinned() -> None:
    sched = _drafting(2, [7])
    ctrl = LengthCtrl()
    hook = _hook(sched, ctrl)
    hook.sticky.skip({"r0": 1, "r1": 1})
    with hook.scheduling():
        pass
    assert not ctrl.queries


def test_the_verify_length_histogram_counts_request_steps_by_drafts_verified() -> None:
    from prometheus_client import CollectorRegistry

    from vllm_hust_vspec.host.engine.metrics import make_metrics

    registry = CollectorRegistry()
    metrics = make_metrics(registry)
    metrics.observe_step((3, 1, 3, 0), (2, 1, 0, 0), 7)
    metrics.observe_step((3, 3), (3, 3), 8)
    assert registry.get_sample_value("vspec_verify_length_requests_total",
                                     {"length": "3"}) is None  # buffered until a flush
    metrics.flush()
    counts = {n: registry.get_sample_value("vspec_verify_length_requests_total",
                                           {"length": str(n)}) for n in (0, 1, 2, 3)}
    assert counts == {0: 1.0, 1: 1.0, 2: None, 3: 4.0}


def test_serving_before_a_pending_calibration_says_so_and_opens_the_trace(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A hook whose engine never ran the calibration (no EngineCore built it, or a loop vSpec
    does not wrap) warns at its first served step and opens the trace naming its prior."""
    import json
    import logging

    trace = tmp_path / "trace.jsonl"
    hook = _hook(FakeScheduler(running=1, waiting=0), Ctrl(), adaptive_trace=str(trace))
    hook.calibration_pending = True
    with caplog.at_level(logging.WARNING, logger="vllm_hust_vspec.host"):
        _before_schedule(hook)
        _before_schedule(hook)  # once only
    warned = [r for r in caplog.records if "no start-up calibration" in r.getMessage()]
    assert len(warned) == 1 and "no cost prior" in warned[0].getMessage()
    assert not hook.calibration_pending
    hook.close()
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["prior"] == "none"


class FakeCore:
    """What EngineCore.post_step reads: its scheduler, the executor and three switches."""

    def __init__(self, sched: FakeScheduler) -> None:
        self.scheduler = sched
        self.async_scheduling = False
        self.batch_queue = None
        self.check_for_draft_tokens = True
        self.rpcs = 0
        self.calls = 0  # of vLLM's post_step
        self.updates: list[Any] = []
        sched.update_draft_token_ids = self.updates.append  # type: ignore[attr-defined]

    def post_step(self, model_executed: bool) -> None:
        """vLLM 0.32's: ask the worker for the drafts it just made (an RPC when serving)."""
        self.calls += 1
        if self.check_for_draft_tokens and not self.async_scheduling and model_executed:
            self.rpcs += 1


def test_after_a_step_that_skipped_the_drafter_no_worker_is_asked_for_drafts() -> None:
    pytest.importorskip("vllm")
    from vllm_hust_vspec.host.engine.scheduler import _make_post_step_wrapper

    sched = FakeScheduler(running=2, waiting=0)
    ctrl = Ctrl(gamma=0)
    hook = _hook(sched, ctrl, adaptive_gamma0_mode="sticky")
    setattr(sched, HOOK_ATTR, hook)
    core = FakeCore(sched)
    post_step = _make_post_step_wrapper(FakeCore.post_step)

    def step(gamma: int) -> Any:
        ctrl.gamma = gamma
        _before_schedule(hook)
        hook.decide(2)
        out = _out({"r0": 1, "r1": 1}, {})
        hook.after_schedule(out)
        return out

    assert getattr(step(0), SKIP_ATTR, False)
    post_step(core, True)
    # the drafter was skipped: nothing to fetch, nothing to store
    assert core.calls == 0 and core.updates == []
    # read once: a second post_step without a new step goes to vLLM's own
    post_step(core, True)
    assert core.calls == 1 and core.rpcs == 1
    # async scheduling (drafts on the device), batch queues and a step the model did not
    # execute keep vLLM's path
    for n, (switch, value, default) in enumerate((("async_scheduling", True, False),
                                                  ("batch_queue", [], None)), start=2):
        step(0)
        setattr(core, switch, value)
        post_step(core, True)
        setattr(core, switch, default)
        assert core.calls == n
    step(0)
    post_step(core, False)
    assert core.calls == 4
    step(0)
    post_step(core, True)  # and the switches back: skipped again
    assert core.calls == 4
    # without the zero-draft fast path (a runner that may still draft) vLLM asks the worker
    hook.settings = Settings(adaptive_gamma0_mode="sticky-spec")
    step(0)
    post_step(core, True)
    assert core.calls == 5 and core.updates == []


def test_a_speculating_step_still_fetches_its_drafts_from_the_worker() -> None:
    pytest.importorskip("vllm")
    from vllm_hust_vspec.host.engine.scheduler import _make_post_step_wrapper

    sched = FakeScheduler(running=2, waiting=0)
    hook = _hook(sched, Ctrl(gamma=2), adaptive_gamma0_mode="sticky")
    setattr(sched, HOOK_ATTR, hook)
    core = FakeCore(sched)
    post_step = _make_post_step_wrapper(FakeCore.post_step)
    _before_schedule(hook)
    hook.decide(2)
    out = _out({"r0": 3, "r1": 3}, {"r0": [5, 6], "r1": [7, 8]})
    hook.after_schedule(out)
    assert not getattr(out, SKIP_ATTR, False)
    post_step(core, True)
    assert core.rpcs == 1 and core.updates == []


class StepScheduler(FakeScheduler):
    """The three Scheduler methods vLLM's EngineCore.step calls, with vSpec's wrappers."""

    unfinished = True  # whether requests remain after the step's update

    def has_unfinished_requests(self) -> bool:
        return self.unfinished

    def schedule(self) -> Any:
        self.hook.decide(len(self.running))
        return _out({f"r{i}": 1 for i in range(len(self.running))}, {})

    def get_grammar_bitmask(self, out: Any) -> None:
        return None

    def update_from_output(self, out: Any, runner_output: Any) -> dict[int, Any]:
        return {}


def _stepping(gamma: int, **settings: Any) -> tuple[Any, Ctrl, list[str], Callable[[], None]]:
    """A scheduler whose hook logs each decision, forward and observation, and EngineCore.step:
    schedule, send to the workers, grammar bitmask, update."""
    from vllm_hust_vspec.host.engine.scheduler import (
        _make_grammar_wrapper,
        _make_update_wrapper,
    )

    class Sched(StepScheduler):
        schedule = _make_schedule_wrapper(StepScheduler.schedule)
        get_grammar_bitmask = _make_grammar_wrapper(StepScheduler.get_grammar_bitmask)
        update_from_output = _make_update_wrapper(StepScheduler.update_from_output)

    sched = Sched(running=2, waiting=0)
    ctrl = Ctrl(gamma=gamma)
    log: list[str] = []
    decide, observe = ctrl.decide, ctrl.observe
    ctrl.decide = lambda b, t: (log.append("decide"), decide(b, t))[1]  # type: ignore
    ctrl.observe = lambda fb: (log.append("observe"), observe(fb))[0]  # type: ignore
    sched.hook = _hook(sched, ctrl, **settings)
    setattr(sched, HOOK_ATTR, sched.hook)
    runner_out = SimpleNamespace(sampled_token_ids=[[1], [2]], req_id_to_index={"r0": 0, "r1": 1})

    def step() -> None:
        out = sched.schedule()
        log.append("forward")
        sched.get_grammar_bitmask(out)
        sched.update_from_output(out, runner_out)

    return sched, ctrl, log, step


def test_a_pinned_step_learns_while_the_next_forward_runs() -> None:
    sched, ctrl, log, step = _stepping(0, adaptive_gamma0_mode="sticky")
    step()
    assert sched.hook.sticky.pinned()
    assert ctrl.seen == [] and sched.hook.step == 0  # busy: kept, not run between forwards
    step()
    step()
    # a pinned step asks the controller nothing: each step's feedback runs once the next
    # step went to the workers
    assert log == ["decide", "forward", "forward", "observe", "forward", "observe"]
    assert sched.hook.step == 2


def test_kept_feedback_runs_before_the_controller_decides_and_is_never_lost() -> None:
    sched, ctrl, log, step = _stepping(2)
    hook = sched.hook
    step()
    assert ctrl.seen == []
    step()
    # the controller sees every completed step before it decides the next
    assert log == ["decide", "forward", "observe", "decide", "forward"]
    # an update that comes before any grammar call runs the kept feedback first: in order
    out = sched.schedule()
    sched.update_from_output(out, SimpleNamespace(sampled_token_ids=[[1], [2]],
                                                  req_id_to_index={"r0": 0, "r1": 1}))
    assert len(ctrl.seen) == 2 and hook.step == 2
    # an idle engine has no next forward: its step's feedback runs at once
    sched.unfinished = False
    step()
    assert len(ctrl.seen) == 4 and hook.step == 4
    # close() runs what is kept
    sched.unfinished = True
    step()
    assert len(ctrl.seen) == 4
    hook.close()
    assert len(ctrl.seen) == 5 and hook.step == 5


def test_a_replaced_controller_gets_its_own_kept_feedback_and_the_new_one_none() -> None:
    sched, ctrl, _, step = _stepping(2)
    hook = sched.hook
    step()
    assert ctrl.seen == []  # kept for the next forward
    fresh = Ctrl(gamma=1)
    hook.restart(fresh, None, None)
    assert len(ctrl.seen) == 1 and fresh.seen == []
    step()
    step()
    assert len(ctrl.seen) == 1 and len(fresh.seen) == 1


@pytest.mark.parametrize("method", ["ngram_gpu", "suffix"])
def test_a_proposer_that_drafts_only_its_configured_k_is_refused(method: str) -> None:
    from vllm_hust_vspec.host.engine.scheduler import VSpecHostError, attach

    spec = SimpleNamespace(method=method, num_speculative_tokens=3)
    sched = SimpleNamespace(vllm_config=SimpleNamespace(speculative_config=spec),
                            num_spec_tokens=3)
    with pytest.raises(VSpecHostError, match=f"method '{method}'"):
        attach(sched, Settings(method="eagle"))


def test_a_gamma_capped_by_another_scheduler_writer_is_the_gamma_recorded() -> None:
    """vSpec decides the step's gamma; a writer after it in Scheduler.schedule (SpecRhythm's
    per-request budgets on the vLLM-HUST core) may only lower it. The step is then learned
    and published at the gamma the workers receive, never at vSpec's own decision."""
    sched = FakeScheduler(running=2, waiting=0)
    ctrl = Ctrl(gamma=3)
    hook = _hook(sched, ctrl)
    _before_schedule(hook)
    assert hook.decide(2) == 3
    out = _out({"r0": 4, "r1": 4}, {"r0": [5, 6, 7], "r1": [7, 8, 9]})
    out.num_spec_tokens_to_schedule = 1  # capped after vSpec's lookup
    hook.after_schedule(out)
    assert hook.last_decided == 1
    runner_out = SimpleNamespace(sampled_token_ids=[[1, 2], [4]],
                                 req_id_to_index={"r0": 0, "r1": 1})
    hook.on_update(out, runner_out)(False)
    (fb,) = ctrl.seen
    assert fb.next_gamma == 1
    # a writer that leaves vSpec's gamma in place changes nothing
    _before_schedule(hook)
    assert hook.decide(2) == 3
    out = _out({"r0": 2, "r1": 2}, {"r0": [5], "r1": [7]})
    hook.after_schedule(out)
    assert hook.last_decided == 3
