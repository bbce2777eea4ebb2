"""The shared plot helpers: trailing moving average and the trace gamma series."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.bench.plot import gamma_series
from vllm_hust_vspec.plotting import moving_average


def test_moving_average_is_trailing_and_short_at_start() -> None:
    assert moving_average([2.0, 4.0, 6.0, 8.0], 2) == [2.0, 3.0, 5.0, 7.0]
    assert moving_average([], 3) == []


def test_gamma_series_uses_decided_then_gamma() -> None:
    records = [{"t": 10.0, "decided": 4}, {"t": 10.5, "gamma": 2}, {"t": 11.0, "decided": 0}]
    ts, avg = gamma_series(records, window=2)
    assert ts == pytest.approx([0.0, 0.5, 1.0])
    assert avg == pytest.approx([4.0, 3.0, 1.0])
