"""``vllm-hust-vspec-sim explain-npu``: the ablations behind the draft model's online run, on
the shipped calibration (docs/simulator.md, "What the data cannot pin")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_hust_vspec.cli.sim import main as sim_main


@pytest.mark.slow
def test_explain_npu_prints_and_writes_the_ablations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "explain.json"
    assert sim_main(["explain-npu", "--json", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    rows = {r["label"]: r for r in doc["ablations"]}
    assert rows["model: fixed 3"]["over_fixed_3"] == 1.0
    # the online run's lead over fixed 3 mostly goes once admissions at gamma 3 cost as at 2
    online = rows["model: online, gammas of its log"]["over_fixed_3"]
    cheap = rows["model: fixed 3, admissions at gamma 3 as cheap as at the native 2"]
    assert online > 1.15 and cheap["over_fixed_3"] > 1.15
    assert rows["model: fixed 3 without refill cohorts"]["over_fixed_3"] < 0.7
    assert 0.2 < doc["tail_share"] < 0.3
    assert "sensitivity" not in doc
    printed = capsys.readouterr().out
    assert "model: online with gamma 2 in every bucket" in printed
    assert "batch <= 64" in printed


def test_explain_npu_reports_a_bad_record(tmp_path: Path) -> None:
    bad = tmp_path / "record.json"
    bad.write_text("{}", encoding="utf-8")
    assert sim_main(["explain-npu", "--record", str(bad)]) == 2
