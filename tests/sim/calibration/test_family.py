"""The calibration family (sim/calibration/family.py), the eager terms of the host cost and
the ``robust`` report (sim/calibration/robust.py, ``vllm-hust-vspec-sim robust``)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from vllm_hust_vspec.cli.sim import main as sim_main
from vllm_hust_vspec.sim import HostCost, make_controller, parse_scenario, simulate
from vllm_hust_vspec.sim.calibration.fair import alternative_calibration
from vllm_hust_vspec.sim.calibration.family import (
    FAMILY_TS,
    PARTIAL_GRAPH_SHAPES,
    UNSEEN_BATCHES,
    GraphShape,
    calibrated_family,
    family_name,
    interpolate,
    partial_graph_doc,
    target_step_ms,
    unseen,
)
from vllm_hust_vspec.sim.calibration.fit import Calibration, _columns, fit_costs
from vllm_hust_vspec.sim.calibration.measurements import load_measurements
from vllm_hust_vspec.sim.calibration.robust import quick_doc, run_robust
from vllm_hust_vspec.sim.calibration.scenarios import (
    _json,
    load_npu_scenario,
    load_record,
    scenario_doc,
    scenario_name,
    shipped_dir,
)
from vllm_hust_vspec.sim.host_cost import HOST_COST_TERMS

DATA = load_measurements()
CAL = load_record()
EAGER = ("eager_step_ms", "eager_per_request_ms")


def _host(sc: object) -> HostCost:
    cost = getattr(sc, "cost", None)
    assert isinstance(cost, HostCost)
    return cost


# -- the eager terms ----------------------------------------------------------------------------
def test_eager_terms_price_only_uncaptured_decode_steps() -> None:
    cost = HostCost(target_base_ms=10.0, target_per_token_ms=0.1, spec_overhead_ms=5.0,
                    draft_pass_ms=2.0, admission_ms=100.0, offpath_pass_ms=50.0,
                    eager_step_ms=7.0, eager_per_request_ms=0.5, native_gammas=(2,))
    assert HOST_COST_TERMS[-2:] == EAGER  # appended: the fitted columns keep their indices
    graph = cost.step_time(4, 8, 2, 4, 0, 0) * 1e3
    assert graph == pytest.approx(10 + 1.2 + 5 + 4)
    # decode only at gamma 3 (no graph): + 7 ms + 0.5 ms x 4 requests
    assert cost.step_time(4, 12, 3, 4, 0, 0) * 1e3 == pytest.approx(10 + 1.6 + 5 + 6 + 9)
    # an admitting step at gamma 3 pays the off-path passes, not the eager terms
    assert cost.step_time(4, 12, 3, 5, 60, 0) * 1e3 == pytest.approx(
        10 + 1.6 + 5 + 6 + 100 + 150)
    # gamma 0, nobody drafting, or every width native: no eager cost
    assert cost.step_time(4, 0, 0, 4, 0, 0) * 1e3 == pytest.approx(10 + 0.4)
    assert cost.step_time(4, 12, 3, 0, 0, 0) * 1e3 == pytest.approx(10 + 1.6)
    all_native = dataclasses.replace(cost, native_gammas=())
    assert all_native.step_time(4, 12, 3, 4, 0, 0) * 1e3 == pytest.approx(10 + 1.6 + 5 + 6)
    # the scenario JSON reads and writes both terms
    assert parse_scenario({**load_npu_doc("draft"), "cost": cost.to_json()}, "t").cost == cost


def load_npu_doc(method: str) -> dict[str, object]:
    """A shipped calibrated scenario's JSON document."""
    path = shipped_dir() / f"{scenario_name(method)}.json"
    doc: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return doc


class _WithoutEager:
    """The host cost priced over the terms that existed before the eager ones."""

    def __init__(self, cost: HostCost) -> None:
        self.cost = cost
        self.n = len(HOST_COST_TERMS) - len(EAGER)

    def step_time(self, num_decode: int, verify_tokens: int, gamma_draft: int,
                  num_drafting: int, prefill_tokens: int, context_tokens: int, *,
                  zero_pass: bool = False) -> float:
        feats = self.cost.features(num_decode, verify_tokens, gamma_draft, num_drafting,
                                   prefill_tokens, zero_pass=zero_pass)
        return sum(c * f for c, f in zip(self.cost.coefficients[:self.n], feats[:self.n],
                                          strict=True)) * 1e-3

    def steady_time(self, batch: int, gamma: int, context_tokens: int) -> float:
        return self.step_time(batch, batch * gamma, gamma, batch, 0, context_tokens)


def test_eager_terms_default_zero_keep_the_shipped_scenarios() -> None:
    for method in ("draft", "eagle"):
        sc = load_npu_scenario(method)
        cost = _host(sc)
        assert (cost.eager_step_ms, cost.eager_per_request_ms) == (0.0, 0.0)
        # the calibration writes the shipped files byte for byte (no eager keys at 0)
        doc = scenario_doc(CAL, DATA, method)
        assert not set(EAGER) & set(doc["cost"])
        assert _json(doc) == (shipped_dir() / f"{scenario_name(method)}.json").read_text(
            encoding="utf-8")
    # gamma 3 is not native on the draft host, so its decode steps carry eager features:
    # priced at 0 they change nothing, run for run ...
    sc = load_npu_scenario("draft")
    cost = _host(sc)
    for policy in ("fixed:3", "oracle"):
        plain = simulate(sc, make_controller(policy, sc), 1)
        legacy = simulate(sc, make_controller(policy, sc), 1, cost=_WithoutEager(cost))
        assert (plain.goodput, plain.steps) == (legacy.goodput, legacy.steps)
    # ... while a non-zero eager cost slows gamma 3 and leaves the native gamma 2 alone
    eager = dataclasses.replace(sc, cost=dataclasses.replace(cost, eager_step_ms=20.0))
    for policy, slower in (("fixed:3", True), ("fixed:2", False)):
        base = simulate(sc, make_controller(policy, sc), 1).goodput
        other = simulate(eager, make_controller(policy, eager), 1).goodput
        assert (other < base) if slower else (other == base)


def test_the_calibration_never_fits_the_eager_terms() -> None:
    columns = {term for _, term in _columns(CAL.options)}
    assert not columns & set(EAGER)
    for coefficients in CAL.coefficients.values():
        assert all(coefficients.get(t, 0.0) == 0.0 for t in EAGER)


# -- interpolation -------------------------------------------------------------------------------
def _scaled(cal: Calibration) -> Calibration:
    """``cal`` with every coefficient moved, some up and some down, one to 0."""
    coef = {m: {k: (0.0 if k == "spec_overhead_ms" else v * (1.5 if i % 2 else 0.5) + 0.1)
                for i, (k, v) in enumerate(sorted(c.items()))}
            for m, c in cal.coefficients.items()}
    return dataclasses.replace(cal, coefficients=coef)


def test_interpolation_is_exact_at_the_ends_monotone_and_clamped() -> None:
    other = _scaled(CAL)
    assert interpolate(CAL, other, 0.0).coefficients == CAL.coefficients
    assert interpolate(CAL, other, 1.0).coefficients == other.coefficients
    steps = [interpolate(CAL, other, t) for t in FAMILY_TS]
    for m, coef in CAL.coefficients.items():
        for k in coef:
            seq = [c.coefficients[m][k] for c in steps]
            assert seq == sorted(seq) or seq == sorted(seq, reverse=True), (m, k, seq)
    # acceptance is the first fit's
    assert interpolate(CAL, other, 0.5).accept == CAL.accept
    # beyond 1 a falling coefficient would turn negative: clamped at 0
    beyond = interpolate(CAL, other, 1.1).coefficients["draft"]
    assert beyond["spec_overhead_ms"] == 0.0 and min(beyond.values()) >= 0.0
    below = interpolate(CAL, other, -0.1).coefficients["draft"]
    assert below["spec_overhead_ms"] > CAL.coefficients["draft"]["spec_overhead_ms"]


@pytest.mark.slow  # refits the alternative calibration (~2 s)
def test_family_runs_from_the_shipped_fit_to_the_alternative() -> None:
    members = {m.name: m.scenario() for m in calibrated_family()}
    assert len(members) == 2 * len(FAMILY_TS)
    alt = alternative_calibration(CAL, DATA)
    for method in ("draft", "eagle"):
        shipped = load_npu_scenario(method)
        t0, t1 = members[family_name(method, 0.0)], members[family_name(method, 1.0)]
        assert t0.cost == shipped.cost and t0.acceptance == shipped.acceptance
        assert t1.cost == parse_scenario(scenario_doc(alt, DATA, method), "alt").cost
        assert t1.cost != t0.cost and t1.acceptance == shipped.acceptance
        costs = [_host(members[family_name(method, t)]).coefficients for t in FAMILY_TS]
        for i, term in enumerate(HOST_COST_TERMS):
            seq = [c[i] for c in costs]
            assert seq == sorted(seq) or seq == sorted(seq, reverse=True), (term, seq)
        # the readings disagree where it matters: target_per_request_ms moves ~20x
        assert costs[0][1] < costs[-1][1]


# -- partial-graph hosts -------------------------------------------------------------------------
def test_partial_graph_hosts_price_uncaptured_widths_higher() -> None:
    bases = {m: scenario_doc(CAL, DATA, m) for m in ("draft", "eagle")}
    names = set()
    for shape in PARTIAL_GRAPH_SHAPES:
        base = parse_scenario(bases[shape.method], "base")
        sc = parse_scenario(partial_graph_doc(bases[shape.method], shape), shape.name)
        names.add(sc.name)
        cost, base_cost = _host(sc), _host(base)
        assert sc.max_num_seqs == shape.batch and "hypothetical" in sc.tags
        assert cost.native_gammas == tuple(sorted(shape.native))
        b = shape.batch
        t_ms = target_step_ms(base_cost, b)
        for g in range(1, sc.max_gamma + 1):
            pg = cost.step_time(b, b * g, g, b, 0, 0)
            plain = base_cost.step_time(b, b * g, g, b, 0, 0)
            if g in shape.native:
                assert pg == pytest.approx(plain)
            else:
                extra = (shape.eager_step + shape.eager_request) * t_ms * 1e-3
                assert pg == pytest.approx(plain + extra) and pg > plain
        # widths without a graph cost more per drafted position than the captured ones
        native = [g for g in shape.native if g > 0]
        others = [g for g in range(1, sc.max_gamma + 1) if g not in shape.native]
        extra_ms = {g: cost.steady_time(b, g, 0) - base_cost.steady_time(b, g, 0)
                    for g in range(1, sc.max_gamma + 1)}
        assert min(extra_ms[g] for g in others) > max(extra_ms[g] for g in native)
    assert len(names) == len(PARTIAL_GRAPH_SHAPES)
    assert {s.name for s in PARTIAL_GRAPH_SHAPES} >= {"pg-cpu-like-b8", "pg-cuda-like-b32",
                                                       "pg-npu-like-b128"}
    with pytest.raises(ValueError):
        partial_graph_doc({**bases["draft"], "cost": "serial-draft"},
                          GraphShape("x", "draft", 8, (1,), 1.0))


# -- unseen scenarios ----------------------------------------------------------------------------
@pytest.mark.slow  # refits the alternative calibration (~2 s)
def test_unseen_is_deterministic_per_seed_and_valid() -> None:
    first, again, other = unseen(3, 12), unseen(3, 12), unseen(4, 12)
    assert [m.doc for m in first] == [m.doc for m in again]
    assert [m.name for m in first] != [m.name for m in other]
    assert [m.doc for m in unseen(3, 5)] == [m.doc for m in first[:5]]  # a prefix
    assert len({m.name for m in first}) == 12
    partial = 0
    for m in first:
        sc = m.scenario()
        cost = _host(sc)
        assert sc.name == m.name and sc.max_num_seqs in UNSEEN_BATCHES
        assert min(cost.coefficients) >= 0.0
        assert "unseen" in sc.tags and "hypothetical" in sc.tags
        if cost.eager_step_ms or cost.eager_per_request_ms:
            partial += 1
            widths = set(range(1, sc.max_gamma + 1))
            assert set(cost.native_gammas) < widths and set(cost.native_gammas) & widths
    assert 0 < partial < 12  # both kinds drawn
    assert unseen(3, 0) == []


# -- the robust report ---------------------------------------------------------------------------
@pytest.mark.slow  # builds the family (~2 s) and runs 7 quick simulations
def test_robust_cli_quick_prints_a_table(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "robust.json"
    rc = sim_main(["robust", "--quick", "--scenario", "pg-cpu-like-b8", "--jobs", "1",
                   "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["scenario", "best", "fixed", "oracle"]
    row = next(line for line in lines if line.startswith("pg-cpu-like-b8"))
    doc = json.loads(out.read_text(encoding="utf-8"))
    (sc,) = doc["scenarios"]
    assert sorted(sc["fixed"]) == ["0", "1", "2", "3", "4"] and doc["seeds"] == [1]
    online = sc["policies"]["online"]
    ref = max(sc["best_fixed"]["tok_s"], sc["oracle"]["tok_s"])
    assert online["ratio"] == pytest.approx(online["tok_s"] / ref)
    assert sc["best_fixed"]["tok_s"] == max(f["tok_s"] for f in sc["fixed"].values())
    assert f"{online['ratio']:.3f}" in row and f"{online['tok_s']:.1f}" in row
    assert "online: worst ratio" in text and "of 1 scenarios below 0.97" in text
    assert sim_main(["robust", "--policies", "no-such-policy"]) == 2


@pytest.mark.slow  # two worker processes
def test_robust_runs_the_same_in_parallel() -> None:
    doc = scenario_doc(CAL, DATA, "eagle")
    members = [m for m in calibrated_family(ts=(0.0,), methods=("eagle",))]
    members = [dataclasses.replace(m, doc=quick_doc(m.doc, 24)) for m in members]
    assert members[0].doc["acceptance"] == doc["acceptance"]
    serial = run_robust(members, ["online"], [1, 2], jobs=1)
    parallel = run_robust(members, ["online"], [1, 2], jobs=2)
    assert serial.as_dict()["scenarios"] == parallel.as_dict()["scenarios"]
    (res,) = serial.scenarios
    assert len(res.fixed) == 3 and all(len(r.per_seed) == 2 for r in res.fixed.values())
    assert res.reference >= res.best_fixed[1].tok_s > 0
    assert math.isfinite(res.policies[0].ratio)


@pytest.mark.slow  # refits the step cost (~2 s)
def test_the_step_cost_fit_is_unchanged_by_the_eager_terms() -> None:
    # the fit reads features by name and its columns leave the eager terms out, so refitting
    # the shipped calibration's step cost gives the shipped coefficients again
    coef = fit_costs(DATA, CAL.accept, opts=CAL.options)
    for method, shipped in CAL.coefficients.items():
        assert not set(EAGER) & set(coef[method])
        assert coef[method] == pytest.approx(shipped, abs=2e-6), method
