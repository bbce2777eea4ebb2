"""AcceptanceModel: per-position rates learned from verify steps, discounted over time."""

from __future__ import annotations

import math
import random

import pytest

from vllm_hust_vspec.adaptive.acceptance import AcceptanceModel


def _poor_drafter() -> AcceptanceModel:
    model = AcceptanceModel(4)
    for _ in range(50):  # batch 8 at gamma 4: six requests reject at once, two accept 1 and 2
        model.update(4, (4,) * 8, (0,) * 6 + (1, 2))
    return model


def test_measured_rates_follow_the_counts() -> None:
    p = _poor_drafter().probabilities()
    assert p[0] == pytest.approx(2 / 8)
    assert p[1] == pytest.approx(1 / 8, rel=0.05)  # the prior weighs a little
    assert p == sorted(p, reverse=True)


def test_a_long_stretch_at_gamma_zero_keeps_the_measured_rate() -> None:
    """Thousands of steps without verify data must not turn a measured poor acceptance back
    into the optimistic prior (that would send a settled controller speculating again)."""
    model = _poor_drafter()
    for _ in range(20_000):
        model.tick(8)
    p = model.probabilities()
    assert p[0] == pytest.approx(2 / 8)
    # undrafted deeper positions shrink toward the geometric continuation of those below
    assert p[1] == pytest.approx(p[0] * p[0], rel=0.05)
    assert model.weights()[0] > 0.0


def test_fresh_data_outweighs_old_after_a_pause() -> None:
    model = _poor_drafter()
    for _ in range(20_000):
        model.tick(8)
    for _ in range(3):  # acceptance came back: every request accepts all 4
        model.update(4, (4,) * 8, (4,) * 8)
    assert model.probabilities()[0] > 0.95


def _step(model: AcceptanceModel, rng: random.Random, rates: list[float], gamma: int,
          trim: int | None = None) -> None:
    """One verify step: request ``i`` accepts each next draft with probability ``rates[i]``;
    with ``trim``, every other request drafted only that many (a budget-trimmed step)."""
    drafted = tuple(trim if trim is not None and i % 2 else gamma for i in range(len(rates)))
    accepted = []
    for alpha, depth in zip(rates, drafted, strict=True):
        a = 0
        while a < depth and rng.random() < alpha:
            a += 1
        accepted.append(a)
    model.update(gamma, drafted, tuple(accepted))


@pytest.mark.parametrize("trim", [None, 3])
def test_a_shift_is_followed_within_two_steps_at_batch_32(trim: int | None) -> None:
    """Acceptance falls from 0.93 to 0.35 for every request at once (a new domain): the long
    memory (an 8-step half-life at batch 32) would still read ~0.84 two steps later."""
    rng = random.Random(3)
    model = AcceptanceModel(7)
    for _ in range(200):
        _step(model, rng, [0.93] * 32, 7, trim)
    assert model.shifts == 0
    for _ in range(2):
        _step(model, rng, [0.35] * 32, 7, trim)
    assert model.shifts == 1
    p = model.probabilities()
    assert p[0] == pytest.approx(0.35, abs=0.12)
    assert p[1] < 0.3
    for _ in range(30):
        _step(model, rng, [0.35] * 32, 7, trim)
    assert model.probabilities()[0] == pytest.approx(0.35, abs=0.06)


@pytest.mark.parametrize("batch", [4, 8, 32, 128])
@pytest.mark.parametrize("rates", [(0.1,), (0.6,), (0.97,), (0.9, 0.3)])
def test_stationary_acceptance_never_trips_the_shift_test(batch: int,
                                                          rates: tuple[float, ...]) -> None:
    """Sampling noise alone, also in a batch of two kinds of request, is not a shift: the
    long memory keeps its precision."""
    rng = random.Random(batch * 7 + len(rates))
    model = AcceptanceModel(5)
    mix = [rates[i % len(rates)] for i in range(batch)]
    for _ in range(3000):
        _step(model, rng, mix, 5)
    assert model.shifts == 0


def _reference_counts(steps: list[tuple[int, tuple[int, ...], tuple[int, ...]]],
                      positions: int) -> tuple[list[float], list[float]]:
    """Requests that drafted / got more than ``k`` tokens, summed over ``steps`` (a plain
    per-request loop, independent of the model's counting)."""
    tried = [0.0] * positions
    got = [0.0] * positions
    for gamma, drafted, accepted in steps:
        for k in range(min(gamma, positions)):
            tried[k] += sum(1 for v in drafted if v > k)
            got[k] += sum(1 for v in accepted if v > k)
    return tried, got


def test_a_restart_keeps_exactly_the_steps_after_the_change() -> None:
    """Batch 8, gamma 6 over 4 modelled positions, drafts trimmed for half the requests: a
    drop that takes several steps to trip the test. The restart keeps the counts of the
    recent suffix least likely under the old rate among those with >= 32 requests at
    position 0 (a brute-force search over the same steps), in both memories."""
    rng = random.Random(5)
    positions, gamma = 4, 6
    model = AcceptanceModel(positions)
    steps: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def step(alpha: float) -> None:
        drafted = tuple(gamma if i % 2 else 2 for i in range(8))
        accepted = []
        for depth in drafted:
            a = 0
            while a < depth and rng.random() < alpha:
                a += 1
            accepted.append(a)
        model.update(gamma, drafted, tuple(accepted))
        steps.append((gamma, drafted, tuple(accepted)))

    for _ in range(300):
        step(0.8)
    assert model.shifts == 0
    before = len(steps)
    old_rate = model._s[0] / model._n[0]
    while model.shifts == 0:
        # the rate the test compares with, just before the step that trips it
        old_rate = min(max(model._s[0] / model._n[0], 0.02), 0.98)
        step(0.3)
        assert len(steps) - before < 40, "the drop was never taken for a shift"
    after = len(steps) - before
    assert after >= 2  # small batch: the test needed a few steps
    # brute force over the suffixes the model kept (>= 128 requests' worth, and at most all
    # the steps since it last restarted: here, all of the ones before the drop too)
    candidates = []
    for j in range(1, len(steps) + 1):
        tried, got = _reference_counts(steps[-j:], positions)
        if tried[0] >= 128 + 8:
            break
        if tried[0] >= 32:
            rate = got[0] / tried[0]
            llr = tried[0] * (
                (rate * math.log(rate / old_rate) if rate > 0 else 0.0)
                + ((1 - rate) * math.log((1 - rate) / (1 - old_rate)) if rate < 1 else 0.0))
            candidates.append((llr, tried, got))
    _, tried, got = max(candidates, key=lambda c: c[0])
    assert model._n == pytest.approx(tried) and model._s == pytest.approx(got)
    assert model._fn == model._n and model._fs == model._s
    assert model.probabilities()[0] < 0.6  # the old rate (0.8) is gone


@pytest.mark.parametrize("positions,gamma", [(4, 4), (4, 6), (300, 300)])
def test_one_update_counts_every_request_once(positions: int, gamma: int) -> None:
    """One step's counts equal a per-request loop's, with uniform and trimmed drafts and
    with counts beyond a byte (the update counts in a bytes copy when it can)."""
    rng = random.Random(gamma)
    for drafted in ((gamma,) * 16, tuple(rng.randint(0, gamma) for _ in range(16))):
        accepted = tuple(rng.randint(0, d) for d in drafted)
        model = AcceptanceModel(positions)
        model.update(gamma, drafted, accepted)
        tried, got = _reference_counts([(gamma, drafted, accepted)], positions)
        assert model._n == pytest.approx(tried) and model._s == pytest.approx(got)
        assert model._fn == pytest.approx(tried) and model._fs == pytest.approx(got)
