"""Cost models: table interpolation/extrapolation and the linear formula."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.sim import COST_PRESETS, LinearCost, TableCost

_H100 = COST_PRESETS["h100-llama8b-eagle"]
assert isinstance(_H100, TableCost)
H100: TableCost = _H100


def test_table_hits_measured_points() -> None:
    assert H100.ms_at(1, 0) == pytest.approx(6.52)
    assert H100.ms_at(64, 3) == pytest.approx(13.50)
    assert H100.ms_at(256, 5) == pytest.approx(57.40)
    assert H100.steady_time(16, 1, 0) == pytest.approx(7.85e-3)


def test_table_interpolates_gamma_and_batch() -> None:
    assert H100.ms_at(1, 2) == pytest.approx((7.37 + 8.84) / 2)
    assert H100.ms_at(64, 4) == pytest.approx((13.50 + 16.83) / 2)
    assert H100.ms_at(32, 0) == pytest.approx(6.90 + (32 - 16) / (64 - 16) * (7.77 - 6.90))
    # monotone in both directions over the grid
    for b in (1, 8, 16, 40, 64, 128, 256):
        row = [H100.ms_at(b, g) for g in range(8)]
        assert row == sorted(row)
    col = [H100.ms_at(b, 3) for b in (1, 2, 16, 50, 64, 200, 256)]
    assert col == sorted(col)


def test_table_extrapolates_linearly() -> None:
    step = (57.40 - 41.85) / 2  # per gamma at batch 256, from gamma 3 -> 5
    assert H100.ms_at(256, 7) == pytest.approx(57.40 + 2 * step)
    slope = (14.49 - 7.77) / (256 - 64)
    assert H100.ms_at(512, 0) == pytest.approx(14.49 + 256 * slope)
    assert H100.ms_at(0.5, 0) == pytest.approx(6.52)  # below the grid: first row


def test_table_mixed_step_uses_average_gamma_and_prefill() -> None:
    t = TableCost(batches=(1.0, 8.0), gammas=(0.0, 4.0), ms=((10.0, 20.0), (20.0, 40.0)),
                  prefill_per_token_ms=0.1)
    # verify 4 per request, draft 0 -> gamma 2 on the table
    assert t.step_time(8, 32, 0, 8, 0, 0) == pytest.approx(30.0e-3)
    assert t.step_time(8, 0, 0, 8, 100, 0) == pytest.approx((20.0 + 10.0) * 1e-3)
    with pytest.raises(ValueError, match="shape"):
        TableCost(batches=(1.0,), gammas=(0.0, 1.0), ms=((1.0,),))


def test_linear_cost_formula() -> None:
    c = LinearCost(target_base_ms=10, target_per_token_ms=0.1, target_per_ctx_ktoken_ms=1.0,
                   draft_step_ms=2, draft_per_token_ms=0.05, draft_ingest_per_token_ms=0.01,
                   spec_overhead_ms=0.5, per_gamma_ms=0.2)
    # 4 decoding requests verifying 2 each, 3 drafted for 4 requests, 10 prefill, 2000 ctx
    tokens = 4 + 8 + 10
    expected = (10 + 0.1 * tokens + 1.0 * 2.0 + 0.5 + 3 * (0.2 + 2 + 0.05 * 4)
                + 0.01 * tokens)
    assert c.step_time(4, 8, 3, 4, 10, 2000) == pytest.approx(expected * 1e-3)
    assert c.step_time(4, 0, 0, 4, 0, 0) == pytest.approx((10 + 0.4) * 1e-3)


def test_presets_have_sensible_draft_ratios() -> None:
    serial = COST_PRESETS["serial-draft"]
    mtp = COST_PRESETS["mtp-head"]
    assert isinstance(serial, LinearCost) and isinstance(mtp, LinearCost)
    target1 = serial.steady_time(1, 0, 0)
    draft1 = serial.steady_time(1, 1, 0) - serial.steady_time(1, 0, 0)
    assert 1 / 8 <= draft1 / target1 <= 1 / 4
    assert mtp.draft_ingest_per_token_ms == 0.0
