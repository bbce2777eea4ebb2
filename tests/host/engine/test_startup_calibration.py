"""The start-up calibration's script (host/engine/cost_prior/calibration.py) driven by the feedback
a
host gives it: which arms it plays, which steps it keeps, the prior it makes."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from vllm_hust_vspec.adaptive._limits import bucket_index, calibration_batches
from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample
from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.adaptive.step_loop import StickyCohort
from vllm_hust_vspec.host.engine.cost_prior.calibration import (
    CalibrationScript,
    blocker,
    scaled_verify,
)
from vllm_hust_vspec.settings import Settings

K = 4
BUDGET = 8192


def _cost(batch: int, gamma: int, ran: bool) -> float:
    return 1e-3 + 1e-5 * batch * (1 + gamma) + (5e-4 + 3e-4 * gamma if ran else 0.0)


ADMIT_S = 2e-3  # what admitting one request adds to a step
PROMPT = 64


def _decode(script: CalibrationScript) -> tuple[CostSample, ...]:
    """The decode-only samples."""
    return tuple(s for s in script.samples() if not s.prefill_tokens)


def _drive(script: CalibrationScript, batch: int, *, sticky: bool = True,
           limit: int = 200, load: Callable[[int], float] = lambda gamma: 1.0) -> list[int]:
    """Run one cohort the way the hook does: decide, then the feedback of the step that
    verified the previous decision (the host's sticky cohort: a pinned zero no longer asks
    decide)."""
    script.start(batch, BUDGET)
    played: list[int] = []
    verified = K  # drafts made before the first decision use max K
    cohort: StickyCohort[int] = StickyCohort()
    ids = range(batch)
    for _ in range(limit):
        if script.done():
            break
        decided = 0 if cohort.pinned() else script.decide(batch, BUDGET)
        skip = False
        if sticky:
            decided, skip = cohort.resolve(decided, ids, script.settled)
        played.append(decided)
        # the calibration loop adds one request when the arm asks; the next step admits it
        admitting = script.wants_admission() and decided == verified
        if admitting and batch == 1:
            script.skip_admission()  # a batch of one has no decode beside an admission
            admitting = False
        elif admitting:
            script.admission_pending = True
        decoding = batch - 1 if admitting else batch  # a fresh request replaced one
        script.observe(StepFeedback(
            batch_size=decoding, gamma=verified, drafted=(verified,) * decoding,
            accepted=(0,) * decoding, committed=decoding,
            interval_s=load(verified) * (_cost(decoding, verified, not skip)
                                         + (ADMIT_S if admitting else 0.0)),
            token_budget=BUDGET, drafter_ran=not skip, next_gamma=decided,
            steady=not admitting, prefill_tokens=PROMPT if admitting else 0))
        verified = decided
    return played


def test_every_arm_is_played_top_down_and_zero_last() -> None:
    script = CalibrationScript(K, clean_steps=3)
    played = _drive(script, 8)
    assert script.done()
    # each arm in one run, from the top of the range down to gamma 0
    runs = [g for i, g in enumerate(played) if i == 0 or played[i - 1] != g]
    assert runs == [4, 3, 2, 1, 0]
    samples = {(s.batch, s.gamma, s.drafter_ran): s for s in _decode(script)}
    assert set(samples) == {(8, g, True) for g in range(1, K + 1)} | {(8, 0, False)}
    for (b, g, ran), s in samples.items():
        assert s.count == 3 and s.seconds == pytest.approx(_cost(b, g, ran))
    # and one step per arm that admitted a request beside the cohort
    admitting = {(s.batch + 1, s.gamma, s.drafter_ran): s for s in script.samples()
                 if s.prefill_tokens}  # at the cohort less the request it replaced
    assert set(admitting) == set(samples)
    for (b, g, ran), s in admitting.items():
        assert (s.count, s.prefill_tokens) == (1, PROMPT)
        assert s.seconds == pytest.approx(_cost(b - 1, g, ran) + ADMIT_S)


def test_every_round_plays_every_arm_and_the_medians_span_the_rounds() -> None:
    script = CalibrationScript(K, clean_steps=2)
    for level in (1.0, 3.0, 1.0):  # the second round runs on a loaded machine
        played = _drive(script, 8, load=lambda gamma, level=level: level)
        assert script.done()
        runs = [g for i, g in enumerate(played) if i == 0 or played[i - 1] != g]
        assert runs == [4, 3, 2, 1, 0]  # each round: every arm, zero last
    for s in _decode(script):
        # two clean steps per round and arm; the loaded round is outvoted on every arm alike
        assert s.count == 6
        assert s.seconds == pytest.approx(_cost(8, s.gamma, s.drafter_ran))


def test_a_load_that_ends_within_a_round_moves_its_level_not_the_shape() -> None:
    """Round 1 quiet, round 2 loaded while its speculative arms ran but not its zero, round 3
    loaded throughout: plain medians over the six steps of each arm would price gamma 0 at
    half its share; read per round, two rounds of the right shape outvote the third."""
    script = CalibrationScript(K, clean_steps=2)
    for load in (lambda g: 1.0, lambda g: 2.0 if g else 1.0, lambda g: 2.0):
        _drive(script, 8, load=load)
    got = {s.gamma: s.seconds for s in _decode(script)}
    for g in range(K + 1):
        assert got[g] / got[K] == pytest.approx(_cost(8, g, g > 0) / _cost(8, K, True))


def test_transition_steps_and_partial_batches_are_not_kept() -> None:
    script = CalibrationScript(K, clean_steps=2)
    script.start(4, BUDGET)
    mixed = StepFeedback(batch_size=4, gamma=4, drafted=(4,) * 4, accepted=(0,) * 4,
                         committed=4, interval_s=1.0, token_budget=BUDGET, next_gamma=3)
    partial = StepFeedback(batch_size=3, gamma=4, drafted=(4,) * 3, accepted=(0,) * 3,
                           committed=3, interval_s=1.0, token_budget=BUDGET, next_gamma=4)
    prefill = StepFeedback(batch_size=4, gamma=4, drafted=(4,) * 4, accepted=(0,) * 4,
                           committed=4, interval_s=1.0, token_budget=BUDGET, next_gamma=4,
                           steady=False)
    for fb in (mixed, partial, prefill):
        script.observe(fb)
    assert script.samples() == ()


def test_an_admission_not_scheduled_beside_its_arm_is_given_up() -> None:
    script = CalibrationScript(1, clean_steps=1)
    script.start(4, BUDGET)
    assert script.decide(4, BUDGET) == 1
    clean = StepFeedback(batch_size=4, gamma=1, drafted=(1,) * 4, accepted=(0,) * 4,
                         committed=4, interval_s=1e-3, token_budget=BUDGET, next_gamma=1)
    script.observe(clean)
    assert script.wants_admission()
    script.admission_pending = True
    assert script.decide(4, BUDGET) == 1  # held for its admitting step
    script.skip_admission()  # the loop's wait ran out
    assert not script.admission_pending and script.decide(4, BUDGET) == 0
    assert all(not s.prefill_tokens for s in script.samples())


def test_a_sync_zero_is_timed_with_the_drafter_running() -> None:
    script = CalibrationScript(K, clean_steps=2)
    _drive(script, 2, sticky=False)
    zero = [s for s in _decode(script) if s.gamma == 0]
    assert [(s.drafter_ran, s.count) for s in zero] == [(True, 2)]


def test_each_bucket_is_calibrated_at_its_middle() -> None:
    assert calibration_batches(8) == [1, 3, 6, 8]  # the top bucket [8, 16) capped at 8
    assert calibration_batches(256) == [1, 3, 6, 12, 24, 48, 96, 192, 256]
    assert calibration_batches(48) == [1, 3, 6, 12, 24, 48]
    assert calibration_batches(1) == calibration_batches(0) == [1]
    assert calibration_batches(2) == [1, 2]
    for top in (1, 2, 3, 8, 48, 100, 256):
        # one batch per bucket, inside it
        assert [bucket_index(b) for b in calibration_batches(top)] == list(
            range(bucket_index(top) + 1))


def test_the_token_budget_caps_the_arms() -> None:
    script = CalibrationScript(K, clean_steps=2)
    script.start(16, 16 * 3)  # room for 1 + 2 tokens per request
    assert script.decide(16, 16 * 3) == 2


def test_cohorts_of_several_batches_make_one_prior() -> None:
    script = CalibrationScript(K, clean_steps=2)
    for b in (1, 2, 4):
        _drive(script, b)
    got = {(s.batch, s.gamma, s.drafter_ran) for s in _decode(script)}
    assert {b for b, _, _ in got} == {1, 2, 4} and len(got) == 3 * (K + 1)


def test_verify_times_are_scaled_onto_the_real_target_only_steps() -> None:
    real = (CostSample(4, 0, 3e-3, drafter_ran=False), CostSample(8, 0, 5e-3, drafter_ran=False),
            CostSample(8, 2, 9e-3))
    dummy = CostPrior("start-up profile", (), needs_anchor=True,
                      verify=((4, 1e-3), (8, 2.5e-3), (24, 4e-3)))
    # real / dummy target alone: 3.0 at 4 tokens, 2.0 at 8: median 2.5
    got = scaled_verify(real, dummy)
    assert [t for t, _ in got] == [4, 8, 24]
    assert [sec for _, sec in got] == pytest.approx([2.5e-3, 6.25e-3, 1e-2])
    assert scaled_verify(real, None) == ()
    assert scaled_verify(real[2:], dummy) == ()  # no target-only step to scale by


def test_engines_whose_steps_others_record_are_not_calibrated() -> None:
    plain = SimpleNamespace(connector=None)
    assert blocker(Settings(method="draft"), plain) is None
    traced = blocker(Settings(method="eagle", diagnostics={"eagle_draft_trace": True}), plain)
    assert traced is not None and "eagle_draft_trace" in traced
    assert "KV connector" in (blocker(Settings(method="draft"),
                                      SimpleNamespace(connector=object())) or "")


def test_data_parallel_engines_are_not_calibrated() -> None:
    def sched(dp: int) -> SimpleNamespace:
        return SimpleNamespace(connector=None, vllm_config=SimpleNamespace(
            parallel_config=SimpleNamespace(data_parallel_size=dp)))

    assert blocker(Settings(method="draft"), sched(1)) is None
    assert "lockstep" in (blocker(Settings(method="draft"), sched(2)) or "")
