"""The vllm-hust-vspec-sim command line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from _sim_helpers import make, scenario_dict

from vllm_hust_vspec.cli.sim import build_parser, main
from vllm_hust_vspec.sim import make_controller, simulate, write_trace


def small_scenario(tmp_path: Path) -> Path:
    p = tmp_path / "small.json"
    p.write_text(json.dumps(scenario_dict()))
    return p


def test_json_output_parses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = small_scenario(tmp_path)
    rc = main(["--scenario", str(path), "--policy", "online", "--policy", "fixed:2",
               "--policy", "oracle", "--seeds", "2", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"] == "unit"
    assert doc["best_fixed_policy"].startswith("fixed:")
    names = [p["policy"] for p in doc["policies"]]
    assert names == ["online", "fixed:2", "oracle"]
    for pol in doc["policies"]:
        for key in ("policy", "goodput_tokens_per_s", "committed_tokens", "sim_seconds",
                    "mean_gamma", "best_fixed_policy"):
            assert key in pol
        assert pol["goodput_tokens_per_s"] > 0
        assert len(pol["goodput_per_seed"]) == 2


def test_table_output_and_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--list-scenarios"]) == 0
    out = capsys.readouterr().out
    assert "b1-eagle1-h100" in out and "non-stationary" in out
    assert main(["--scenario", str(small_scenario(tmp_path)), "--policy", "hf-heuristic",
                 "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "best fixed gamma in hindsight" in out and "hf-heuristic" in out


def test_errors_exit_2_with_clear_message(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scenario", "nope-not-here"]) == 2
    assert "no scenario named 'nope-not-here'" in capsys.readouterr().err
    assert main(["--scenario", str(small_scenario(tmp_path)), "--policy", "magic"]) == 2
    assert "unknown policy 'magic'" in capsys.readouterr().err
    assert main([]) == 2
    assert "--scenario" in capsys.readouterr().err


def test_trace_replay_from_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = make(workload__output_len={"type": "fixed", "value": 120})
    trace = tmp_path / "t.jsonl"
    write_trace(trace, simulate(sc, make_controller("ucb1", sc), seed=1, trace=True).trace)
    out_json = tmp_path / "fitted.json"
    rc = main(["--trace", str(trace), "--policy", "online", "--seeds", "1", "--json",
               "--write-scenario", str(out_json), "--output-len", "64"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scenario"] == "replay-t"
    assert json.loads(out_json.read_text())["schema_version"] == 1


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None,
                    reason="matplotlib installed: the missing-dependency path cannot run")
def test_plot_without_matplotlib_says_how_to_install(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--scenario", str(small_scenario(tmp_path)), "--policy", "fixed:1",
               "--seeds", "1", "--plot", str(tmp_path / "x.png")])
    assert rc == 2
    assert "pip install vllm-hust-vspec[bench]" in capsys.readouterr().err


def test_help_mentions_policies_and_docs() -> None:
    text = build_parser().format_help()
    assert "--trace" in text and "sglang-adaptive" in text and "docs/simulator.md" in text
