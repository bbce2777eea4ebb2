"""SpecRhythm's per-request TPOT-SLO budgets (sim/baselines/spec_rhythm.py) against its rules,
the TPOT-SLO workload and the SLO attainment metric."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from _sim_helpers import make

from vllm_hust_vspec.adaptive.feedback import VerifyQuery
from vllm_hust_vspec.cli.sim import main as sim_main
from vllm_hust_vspec.sim import ScenarioError
from vllm_hust_vspec.sim.baselines.spec_rhythm import (
    RhythmState,
    SpecRhythmBaseline,
    SpecRhythmRules,
    make_spec_rhythm,
    profiled_roofline,
)
from vllm_hust_vspec.sim.engine import simulate
from vllm_hust_vspec.sim.policies import SPEC_RHYTHM, known_policy_help, make_controller
from vllm_hust_vspec.sim.scenario import list_scenarios, list_slo_scenarios, load_scenario
from vllm_hust_vspec.sim.workload import make_requests

SLO_CLASSES = [{"name": "tight", "weight": 1.0, "tpot_ms": 8.0},
               {"name": "loose", "weight": 2.0, "tpot_ms": 60.0}]


def _random_state(rng: random.Random, slo: float | None) -> RhythmState:
    st = RhythmState(arrival_s=rng.uniform(0.0, 5.0), slo_tpot_ms=slo)
    for _ in range(rng.randrange(0, 12)):
        proposed = rng.randrange(0, 6)
        st.record(rng.randrange(0, proposed + 1), proposed, rng.uniform(5.0, 60.0), 0.2)
    return st


# -- the rule ---------------------------------------------------------------------------------

def test_budget_stays_within_min_gamma_and_the_roofline_cap() -> None:
    rules = SpecRhythmRules(1, 6, roofline={"4:2": 1, "batch:4": 3, "default": 5})
    rng = random.Random(7)
    seen: dict[str, set[int]] = {"4:2": set(), "batch:4": set(), "default": set()}
    for _ in range(3000):
        st = _random_state(rng, rng.choice([None, 10.0, 40.0, 200.0]))
        b = rng.choice([3, 4])
        ctx = rng.choice([100, 700])  # context buckets 1 and 2
        plan = rules.plan(st, batch_size=b, context_len=ctx, now_s=st.arrival_s
                          + rng.uniform(0.0, 0.5))
        key = "4:2" if (b, ctx) == (4, 700) else "batch:4" if b == 4 else "default"
        limit = {"4:2": 1, "batch:4": 3, "default": 5}[key]
        assert rules.min_gamma <= plan.gamma <= min(rules.max_gamma, limit)
        assert plan.cap == limit
        seen[key].add(plan.gamma)
    # each cap is reached, so the bound is the cap and not something tighter
    assert max(seen["4:2"]) == 1 and max(seen["batch:4"]) == 3 and max(seen["default"]) == 5


def test_max_gamma_bounds_a_looser_roofline_and_min_gamma_a_tighter_one() -> None:
    rules = SpecRhythmRules(2, 4, roofline={"default": 9})
    assert rules.roofline_cap(8, 100) == 4
    rules = SpecRhythmRules(2, 4, roofline={"default": 1})
    assert rules.roofline_cap(8, 100) == 2
    with pytest.raises(ValueError):
        SpecRhythmRules(0, 4)
    with pytest.raises(ValueError):
        SpecRhythmRules(3, 2)


def test_request_without_slo_gets_the_cap() -> None:
    rules = SpecRhythmRules(1, 5, roofline={"batch:2": 3})
    rng = random.Random(1)
    for _ in range(200):
        st = _random_state(rng, None)
        assert rules.plan(st, batch_size=2, context_len=50, now_s=9.0).gamma == 3
        assert rules.plan(st, batch_size=7, context_len=50, now_s=9.0).gamma == 5


def test_falling_behind_the_slo_never_lowers_the_budget() -> None:
    """Urgency (time since arrival, observed TPOT over the SLO) raises the budget."""
    rules = SpecRhythmRules(1, 8)
    rng = random.Random(3)
    rose = 0
    for _ in range(300):
        st = _random_state(rng, rng.choice([20.0, 50.0]))
        times = sorted(st.arrival_s + rng.uniform(0.0, 0.2) for _ in range(6))
        plans = [rules.plan(st, batch_size=4, context_len=300, now_s=t) for t in times]
        assert all(a.gamma <= b.gamma for a, b in zip(plans, plans[1:], strict=False))
        assert all(a.urgency <= b.urgency for a, b in zip(plans, plans[1:], strict=False))
        rose += plans[-1].gamma > plans[0].gamma
    assert rose > 30  # the urgency term does move budgets


def test_tighter_slo_gets_at_least_the_budget_of_a_looser_one() -> None:
    rules = SpecRhythmRules(1, 8)
    rng = random.Random(5)
    strictly = 0
    for _ in range(300):
        tight = _random_state(rng, 10.0)
        loose = RhythmState(**{**_fields(tight), "slo_tpot_ms": 80.0})
        now = tight.arrival_s + rng.uniform(0.0, 0.08)
        a = rules.plan(tight, batch_size=8, context_len=300, now_s=now).gamma
        b = rules.plan(loose, batch_size=8, context_len=300, now_s=now).gamma
        assert a >= b
        strictly += a > b
    assert strictly > 30


def _fields(st: RhythmState) -> dict[str, Any]:
    return {k: getattr(st, k) for k in RhythmState.__slots__}


def test_acceptance_below_the_floor_shrinks_the_budget() -> None:
    rules = SpecRhythmRules(1, 8, acceptance_floor=0.4)
    rng = random.Random(11)
    for _ in range(300):
        base = _random_state(rng, rng.choice([20.0, 60.0]))
        now = base.arrival_s + rng.uniform(0.0, 0.3)
        plans = []
        for ema in (0.05, 0.15, 0.3, 0.39, 0.4):
            st = RhythmState(**{**_fields(base), "acceptance_ema": ema})
            plans.append(rules.plan(st, batch_size=4, context_len=300, now_s=now).gamma)
        assert plans == sorted(plans)
    # a request whose drafts keep failing ends at min gamma, however late it is
    st = RhythmState(arrival_s=0.0, slo_tpot_ms=20.0)
    for _ in range(40):
        st.record(0, 5, 30.0, rules.alpha)
    assert st.acceptance_ema < 0.01
    assert rules.plan(st, batch_size=4, context_len=300, now_s=100.0).gamma == 1
    # the same request with its drafts accepted gets the cap
    good = RhythmState(arrival_s=0.0, slo_tpot_ms=20.0)
    for _ in range(40):
        good.record(5, 5, 30.0, rules.alpha)
    assert rules.plan(good, batch_size=4, context_len=300, now_s=100.0).gamma == 8


def test_state_counters_ema_and_observed_tpot() -> None:
    st = RhythmState(arrival_s=0.0, slo_tpot_ms=30.0)
    assert st.observed_tpot_ms == 0.0 and st.acceptance_ema == 1.0
    st.record(1, 4, 40.0, 0.5)
    assert st.acceptance_ema == pytest.approx(0.5 * 0.25 + 0.5 * 1.0)
    st.record(3, 3, 20.0, 0.5)
    assert st.accepted_tokens == 4 and st.proposed_tokens == 7
    assert st.observed_tpot_ms == pytest.approx(60.0 / 4)
    ema = st.acceptance_ema
    st.record(0, 0, 10.0, 0.5)  # nothing proposed: time counts, acceptance does not move
    assert st.acceptance_ema == ema and st.decode_elapsed_ms == pytest.approx(70.0)


# -- in the simulator -------------------------------------------------------------------------

class _Spy(SpecRhythmBaseline):
    """Checks each step against the rule: one cap = the largest budget, per-request trims."""

    def __init__(self, base: SpecRhythmBaseline) -> None:
        super().__init__(base.rules, name=base.name)
        self.caps: list[int] = []
        self.trims = 0
        self.steps_with_spread = 0
        self.pending_in = self.pending_out = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        cap = super().decide(batch_size, token_budget)
        if self.budgets:
            assert cap == max(self.budgets.values())
            assert all(self.rules.min_gamma <= g <= self.rules.max_gamma
                       for g in self.budgets.values())
            self.steps_with_spread += len(set(self.budgets.values())) > 1
        self.caps.append(cap)
        return cap

    def verify_lengths(self, query: VerifyQuery) -> list[int]:
        planned = dict(self.budgets)
        out = super().verify_lengths(query)
        for rid, d, n in zip(query.request_ids, query.drafted, out, strict=True):
            assert n == (min(d, planned[rid]) if rid in planned else d)
            self.trims += n < d
        self.pending_in += sum(query.drafted)
        self.pending_out += sum(out)
        return out


def _slo_scenario(**changes: Any) -> Any:
    return make(workload__slo_classes=SLO_CLASSES, max_gamma=5,
                acceptance={"type": "mixture", "components": [
                    {"weight": 1, "model": {"type": "iid", "alpha": 0.9}},
                    {"weight": 1, "model": {"type": "iid", "alpha": 0.2}}]}, **changes)


def test_simulated_steps_follow_the_cap_and_trim_rule() -> None:
    sc = _slo_scenario()
    spy = _Spy(make_spec_rhythm(sc, roofline=False))
    res = simulate(sc, spy, 4, policy="spec-rhythm")
    assert res.committed_tokens == res.requested_tokens
    assert spy.trims > 0 and spy.steps_with_spread > 0
    assert min(spy.caps) >= 1  # SpecRhythm always drafts, even where gamma 0 is allowed
    # the trims reach the target: it verifies fewer drafts than the drafter made
    assert res.drafted_tokens <= spy.pending_out < spy.pending_in


def test_roofline_variant_never_exceeds_its_table() -> None:
    sc = _slo_scenario(cost={"type": "linear", "target_base_ms": 10.0,
                             "target_per_token_ms": 0.6, "draft_step_ms": 1.5})
    base = make_spec_rhythm(sc, roofline=True)
    table = base.rules.roofline
    assert set(table) == {f"batch:{b}" for b in range(1, sc.max_num_seqs + 1)}
    spy = _Spy(base)

    def decide(batch_size: int, token_budget: int) -> int:
        cap = _Spy.decide(spy, batch_size, token_budget)
        if spy.budgets:
            limit = table[f"batch:{len(spy.budgets)}"]
            assert max(spy.budgets.values()) <= limit
        return cap

    spy.decide = decide  # type: ignore[method-assign]
    simulate(sc, spy, 2, policy="spec-rhythm-roofline")
    assert len(spy.caps) > 10


def test_profiled_roofline_follows_the_cost_of_drafting() -> None:
    cheap = make(max_gamma=5, acceptance={"type": "iid", "alpha": 0.8},
                 cost={"type": "linear", "target_base_ms": 10.0, "target_per_token_ms": 0.0,
                       "draft_step_ms": 0.0})
    dear = make(max_gamma=5, acceptance={"type": "iid", "alpha": 0.8},
                cost={"type": "linear", "target_base_ms": 10.0, "target_per_token_ms": 0.5,
                      "draft_step_ms": 20.0})
    assert set(profiled_roofline(cheap, 1).values()) == {5}
    assert set(profiled_roofline(dear, 1).values()) == {1}
    # a target whose cost grows with tokens: deeper at small batches than at large ones
    mixed = make(max_gamma=5, max_num_seqs=64, max_num_batched_tokens=4096,
                 acceptance={"type": "iid", "alpha": 0.8},
                 cost={"type": "linear", "target_base_ms": 10.0, "target_per_token_ms": 0.3,
                       "draft_step_ms": 0.5})
    table = profiled_roofline(mixed, 1)
    assert table["batch:1"] > table["batch:64"]
    assert all(table[f"batch:{b}"] >= table[f"batch:{b + 1}"] for b in range(1, 64))


def test_policies_are_registered_by_name_only() -> None:
    sc = _slo_scenario()
    for name in SPEC_RHYTHM:
        assert name in known_policy_help()
        assert isinstance(make_controller(name, sc), SpecRhythmBaseline)
    with pytest.raises(RuntimeError, match="only runs inside the simulator"):
        make_controller("spec-rhythm", sc).decide(4, 512)


# -- workload and metric ----------------------------------------------------------------------

def test_slo_classes_leave_lengths_and_arrivals_unchanged() -> None:
    plain = make(workload__arrival={"type": "poisson", "rate_per_s": 50.0})
    slo = make(workload__arrival={"type": "poisson", "rate_per_s": 50.0},
               workload__slo_classes=SLO_CLASSES)
    a, b = make_requests(plain.workload, 9), make_requests(slo.workload, 9)
    assert [(r.prompt_len, r.output_len, r.arrival_s) for r in a] == [
        (r.prompt_len, r.output_len, r.arrival_s) for r in b]
    assert all(r.slo_class is None and r.slo_tpot_ms is None for r in a)
    slo_of = {c["name"]: c["tpot_ms"] for c in SLO_CLASSES}
    many = make(workload__num_requests=3000, workload__slo_classes=SLO_CLASSES)
    reqs = make_requests(many.workload, 1)
    assert all(r.slo_tpot_ms == slo_of[r.slo_class or ""] for r in reqs)
    share = sum(r.slo_class == "tight" for r in reqs) / len(reqs)
    assert abs(share - 1 / 3) < 0.03  # weights 1 : 2


def test_slo_attainment_counts_requests_whose_mean_tpot_met_their_slo() -> None:
    sc = _slo_scenario()
    res = simulate(sc, make_controller("fixed:2", sc), 6, policy="fixed:2")
    specs = {s.rid: s for s in make_requests(sc.workload, 6)}
    total: dict[str, int] = {}
    met: dict[str, int] = {}
    for rid, _arr, first, finish in res.requests:
        s = specs[rid]
        if s.output_len <= 1 or s.slo_class is None or s.slo_tpot_ms is None:
            continue
        total[s.slo_class] = total.get(s.slo_class, 0) + 1
        met[s.slo_class] = met.get(s.slo_class, 0) + (
            1e3 * (finish - first) / (s.output_len - 1) <= s.slo_tpot_ms)
    assert res.slo_total == total
    assert res.slo_met == {c: met.get(c, 0) for c in total}
    assert 0.0 < res.slo_attainment < 1.0
    assert res.slo_met["loose"] / total["loose"] > res.slo_met["tight"] / total["tight"]
    plain = simulate(make(), make_controller("fixed:2", make()), 6)
    assert plain.slo_total == {} and math.isnan(plain.slo_attainment)


@pytest.mark.parametrize("classes, message", [
    ([{"name": "a", "tpot_ms": 10}, {"name": "a", "tpot_ms": 20}], "duplicate SLO class"),
    ([{"name": "a", "tpot_ms": 0}], r"tpot_ms.*must be > 0"),
    ([{"name": "a", "tpot_ms": 10, "weight": 1, "p99": 3}], "unknown key"),
    ([], "non-empty list"),
])
def test_bad_slo_classes_are_rejected(classes: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        make(workload__slo_classes=classes)


def test_shipped_slo_scenario_loads_by_name_outside_the_suite() -> None:
    names = list_slo_scenarios()
    assert names and not set(names) & set(list_scenarios())
    for name in names:
        sc = load_scenario(name)
        assert sc.name == name and len(sc.workload.slo_classes) >= 2


@pytest.mark.slow
def test_cli_reports_slo_attainment_per_class(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--list-scenarios"]) == 0
    assert "slo-npu-draft-b32" in capsys.readouterr().out
    assert sim_main(["--scenario", "slo-npu-draft-b32", "--policy", "spec-rhythm",
                     "--policy", "fixed:0", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("policy"))
    assert "slo %" in head and "tight" in head and "loose" in head
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith(("spec-rhythm", "fixed:0"))}
    for row in rows.values():
        assert all(0.0 <= float(x) <= 100.0 for x in row[-3:])
    # without SLO classes the table keeps its columns
    assert sim_main(["--scenario", "b1-eagle1-h100", "--policy", "fixed:1", "--seeds", "1"]) == 0
    assert "slo %" not in capsys.readouterr().out
