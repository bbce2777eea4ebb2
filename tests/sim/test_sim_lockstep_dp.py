"""The lockstep data-parallel model (sim/lockstep_dp.py): one agreed gamma against per-rank."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.sim import COST_PRESETS
from vllm_hust_vspec.sim.lockstep_dp import (
    POLICIES,
    SCENARIOS,
    RankLoad,
    committed,
    rank_time,
    run,
    simulate_step,
)

COST = COST_PRESETS["mtp-head"]


def test_expected_tokens_and_the_dummy_batch_price() -> None:
    assert committed(0.5, 0) == 1.0 and committed(0.5, 2) == pytest.approx(1.75)
    idle = RankLoad(0, 0.7)
    # a dummy batch drafts at least one pass: gamma 0 and 1 cost the same there
    assert rank_time(COST, idle, 0, 512) == rank_time(COST, idle, 1, 512)
    assert rank_time(COST, idle, 3, 512) > rank_time(COST, idle, 1, 512)


def test_the_split_oracle_bounds_every_agreed_gamma() -> None:
    loads = [RankLoad(64, 0.9), RankLoad(2, 0.3), RankLoad(0, 0.5), RankLoad(16, 0.7)]
    step = simulate_step(loads, COST, max_gamma=5, fixed_gamma=5)
    rate = {p: step.tokens[p] / step.seconds[p] for p in POLICIES}
    assert rate["per-rank-oracle"] >= rate["agreed-oracle"] - 1e-9
    assert rate["agreed-oracle"] >= max(rate["agreed-vote"], rate["fixed"]) - 1e-9


@pytest.mark.parametrize("ranks", [8, 16, 32, 64])
def test_alike_ranks_lose_nothing_to_one_agreed_gamma(ranks: int) -> None:
    report = run(SCENARIOS["alike"], ranks, COST, steps=12, seed=ranks)
    assert report.ratio("agreed-vote") >= 0.97
    assert report.ratio("agreed-vote") > report.ratio("fixed")


def test_a_skewed_load_is_where_agreement_loses() -> None:
    small = run(SCENARIOS["skewed-load"], 2, COST, steps=12)
    large = run(SCENARIOS["skewed-load"], 32, COST, steps=12)
    assert large.ratio("agreed-oracle") < 0.9 < small.ratio("agreed-oracle")
    with pytest.raises(ValueError, match=">= 2 ranks"):
        run(SCENARIOS["alike"], 1, COST)


def test_the_sim_cli_prints_the_lockstep_table(capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_hust_vspec.cli.sim import main

    assert main(["lockstep-dp", "--steps", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cost mtp-head, gamma 0..5, fixed = 5, 4 steps, seed 0")
    assert "| scenario | ranks | agreed (vote) |" in out
    assert all(f"* {name}:" in out for name in SCENARIOS)
