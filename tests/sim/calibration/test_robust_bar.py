"""The online controller on every host shape the NPU data leaves open, on partial-graph hosts
and on scenarios drawn the same way (``vllm-hust-vspec-sim robust``): at least 0.97x the
better of the best fixed gamma in hindsight and the oracle everywhere, and the collapse the one
step-cost model removed."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.sim.calibration.family import family, unseen
from vllm_hust_vspec.sim.calibration.robust import run_robust

BAR = 0.97  # the bar; the worst today is 0.974 on the family, 0.986 on unseen(0, 16)


@pytest.mark.slow  # 14 scenarios x 8 policies x 3 seeds (~60 s on 2 cores)
def test_online_holds_up_on_the_whole_family() -> None:
    report = run_robust(family(), ["online"], [1, 2, 3], jobs=2)
    ratios = {r.name: r.policies[0].ratio for r in report.scenarios}
    assert min(ratios.values()) >= BAR, ratios
    # the alternative reading of the draft-model data, where the affine, steady-only cost
    # model collapsed to 0.74x fixed gamma 2 by paying admissions off the native width
    fixed2 = {r.name: r.fixed[2].tok_s for r in report.scenarios}
    for name in ("npu-draft-t0.75", "npu-draft-t1.00"):
        online = next(r.policies[0].tok_s for r in report.scenarios if r.name == name)
        assert online >= 0.97 * fixed2[name], (name, online, fixed2[name])


@pytest.mark.slow  # 16 scenarios x 3 seeds (~70 s on 2 cores)
def test_online_holds_up_on_scenarios_never_tuned_on() -> None:
    report = run_robust(unseen(0, 16), ["online"], [1, 2, 3], jobs=2)
    ratios = {r.name: r.policies[0].ratio for r in report.scenarios}
    assert min(ratios.values()) >= BAR, ratios
