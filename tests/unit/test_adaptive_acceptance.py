"""AcceptanceModel: per-position rates learned from verify steps, discounted over time."""

from __future__ import annotations

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
