"""Engine semantics: conservation, common random numbers, feedback like the host sends."""

from __future__ import annotations

from typing import Any

import pytest
from _sim_helpers import make

from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.sim import all_policies, make_controller, simulate
from vllm_hust_vspec.sim.runner import evaluate

POISSON = {"type": "poisson", "rate_per_s": 40.0, "cv": 2.0}


@pytest.mark.parametrize("policy", ["fixed:0", "fixed:4", "oracle", "hf-heuristic", "ucb1",
                                    "sglang-adaptive", "vllm-batch-schedule", "online"])
def test_committed_tokens_equal_requested_output(policy: str) -> None:
    # Tiny token budget forces chunked prefill and spec-token trimming; output lengths of 1
    # finish at prefill; long drafts near the end of a request must be truncated.
    sc = make(max_num_batched_tokens=24, workload__arrival=POISSON)
    res = simulate(sc, make_controller(policy, sc), seed=5, policy=policy)
    assert res.committed_tokens == res.requested_tokens
    assert len(res.requests) == sc.workload.num_requests
    assert all(first <= finish for _, _, first, finish in res.requests)


def test_same_policy_twice_is_identical() -> None:
    sc = make(acceptance={"type": "iid", "alpha": 0.6, "beta_concentration": 5.0})
    a = simulate(sc, make_controller("ucb1", sc), seed=11, record=True)
    b = simulate(sc, make_controller("ucb1", sc), seed=11, record=True)
    assert a.goodput == b.goodput
    assert a.timeline == b.timeline
    assert a.requests == b.requests


def test_policies_see_identical_open_loop_arrivals() -> None:
    sc = make(workload__arrival=POISSON)
    runs = [simulate(sc, make_controller(p, sc), seed=2) for p in ("fixed:0", "fixed:4")]
    arrivals = [[(rid, arr) for rid, arr, _, _ in r.requests] for r in runs]
    assert arrivals[0] == arrivals[1]
    assert runs[0].requested_tokens == runs[1].requested_tokens
    # ...while the policies themselves do differ
    assert runs[0].sim_seconds != runs[1].sim_seconds


def test_different_seeds_differ() -> None:
    sc = make()
    a = simulate(sc, make_controller("fixed:2", sc), seed=1)
    b = simulate(sc, make_controller("fixed:2", sc), seed=2)
    assert a.requested_tokens != b.requested_tokens or a.goodput != b.goodput


def test_perfect_cheap_drafter_prefers_deeper_drafts() -> None:
    sc = make(acceptance={"type": "iid", "alpha": 1.0},
              cost={"type": "linear", "target_base_ms": 10.0, "target_per_token_ms": 0.01,
                    "draft_step_ms": 0.2},
              workload__output_len={"type": "fixed", "value": 200})
    goodputs = [simulate(sc, make_controller(f"fixed:{k}", sc), seed=1).goodput
                for k in range(0, 5)]
    assert goodputs == sorted(goodputs)
    assert goodputs[4] > 3.0 * goodputs[0]


def test_useless_drafter_prefers_no_drafts() -> None:
    sc = make(acceptance={"type": "iid", "alpha": 0.0})
    g0 = simulate(sc, make_controller("fixed:0", sc), seed=1)
    g3 = simulate(sc, make_controller("fixed:3", sc), seed=1)
    assert g0.goodput > g3.goodput
    assert g3.accepted_tokens == 0


class _Recorder:
    """Decides a cycling gamma and records every feedback."""

    def __init__(self) -> None:
        self.decisions: list[int] = []
        self.feedback: list[StepFeedback] = []
        self.budgets: list[int] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        self.budgets.append(token_budget)
        self.decisions.append(len(self.decisions) % 4)
        return self.decisions[-1]

    def observe(self, feedback: StepFeedback) -> None:
        self.feedback.append(feedback)

    def snapshot(self) -> dict[str, Any]:
        return {}


def test_feedback_matches_host_semantics() -> None:
    sc = make(workload__output_len={"type": "fixed", "value": 60})
    rec = _Recorder()
    simulate(sc, rec, seed=4, record=True)
    assert rec.feedback and set(rec.budgets) == {sc.max_num_batched_tokens}
    steady = [fb for fb in rec.feedback if fb.steady]
    assert steady and any(not fb.steady for fb in rec.feedback)
    for fb in rec.feedback:
        assert fb.interval_s > 0
        assert fb.token_budget == sc.max_num_batched_tokens
        assert len(fb.drafted) == len(fb.accepted) == fb.batch_size
        assert all(0 <= a <= d for a, d in zip(fb.accepted, fb.drafted, strict=True))
        # the drafts verified now were decided one step earlier
        assert all(d == fb.gamma for d in fb.drafted)
    for fb in steady:
        # committed = accepted + 1 per request, unless a request hit its output length
        assert fb.committed <= sum(fb.accepted) + fb.batch_size


def test_gamma_verified_is_previous_decision() -> None:
    sc = make(workload__num_requests=4, workload__arrival={"type": "closed", "concurrency": 4},
              workload__output_len={"type": "fixed", "value": 400})
    rec = _Recorder()
    simulate(sc, rec, seed=1)
    # after the prefill steps every step decodes, so feedback i verifies decision i-1
    decode_from = len(rec.decisions) - len(rec.feedback)
    pairs = list(zip(rec.decisions[decode_from - 1:], rec.feedback, strict=False))
    assert pairs and all(fb.gamma == d for d, fb in pairs)


def test_phases_change_acceptance() -> None:
    phased = {"type": "phased", "phases": [
        {"tokens": 600, "model": {"type": "iid", "alpha": 1.0}},
        {"model": {"type": "iid", "alpha": 0.0}}]}
    sc = make(acceptance=phased, workload__output_len={"type": "fixed", "value": 100})
    rec = _Recorder()
    simulate(sc, rec, seed=1)
    rates = [sum(fb.accepted) / max(1, sum(fb.drafted)) for fb in rec.feedback
             if sum(fb.drafted)]
    assert rates[0] == 1.0 and rates[-1] == 0.0


def test_evaluate_reports_best_fixed_and_ratios() -> None:
    sc = make()
    report = evaluate(sc, ["online", "oracle"], num_seeds=2)
    assert [p.policy for p in report.policies] == ["online", "oracle"]
    assert report.best_fixed_policy is not None
    assert report.best_fixed_policy.startswith("fixed:")
    assert report.get("oracle") is not None
    assert report.seeds == [sc.seed, sc.seed + 1]
    for p in report.policies:
        assert p.ratio_to_best_fixed > 0


def test_all_policies_cover_every_fixed_gamma() -> None:
    sc = make(min_gamma=1, max_gamma=3)
    names = all_policies(sc)
    assert [n for n in names if n.startswith("fixed:")] == ["fixed:1", "fixed:2", "fixed:3"]
    assert {"online", "profile", "oracle", "vllm-batch-schedule", "sglang-adaptive",
            "hf-heuristic", "ucb1"} <= set(names)
