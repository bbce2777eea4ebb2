"""The online controller on every host shape the NPU data leaves open and on partial-graph
hosts (``vllm-hust-vspec-sim robust``): where it stands against the best fixed gamma and the
oracle, and the collapse the one step-cost model removed."""

from __future__ import annotations

import pytest

from vllm_hust_vspec.sim.calibration.family import family
from vllm_hust_vspec.sim.calibration.robust import run_robust

# The worst ratio over the family (3 seeds) is 0.950; the target is 0.97, not met everywhere
# yet (docs/benchmarks.md#robustness-across-host-shapes lists each scenario).
WORST = 0.94


@pytest.mark.slow  # 14 scenarios x 8 policies x 3 seeds (~45 s on 2 cores)
def test_online_holds_up_on_the_whole_family() -> None:
    report = run_robust(family(), ["online"], [1, 2, 3], jobs=2)
    ratios = {r.name: r.policies[0].ratio for r in report.scenarios}
    assert min(ratios.values()) >= WORST, ratios
    # the alternative reading of the draft-model data, where the affine, steady-only cost
    # model collapsed to 0.74x fixed gamma 2 by paying admissions off the native width
    fixed2 = {r.name: r.fixed[2].tok_s for r in report.scenarios}
    for name in ("npu-draft-t0.75", "npu-draft-t1.00"):
        online = next(r.policies[0].tok_s for r in report.scenarios if r.name == name)
        assert online >= 0.97 * fixed2[name], (name, online, fixed2[name])
    # EAGLE (every reading): within 5 % of the better of the best fixed gamma and the oracle
    assert all(ratios[f"npu-eagle-t{t:.2f}"] >= 0.95 for t in (0.0, 0.25, 0.5, 0.75, 1.0))
