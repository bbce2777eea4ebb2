"""Traces appended over several server starts: split into runs at header lines (and at step
counter resets), one run replayed at a time, a cut-off last line tolerated; binary input to
the simulator is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _sim_helpers import make

from vllm_hust_vspec.cli.sim import main
from vllm_hust_vspec.sim import (
    ScenarioError,
    load_trace,
    make_controller,
    read_trace_runs,
    scenario_dict_from_trace,
    select_trace_run,
    simulate,
)


def _steps(seed: int, alpha: float) -> list[dict[str, Any]]:
    """Plugin-style step records (with the step counter) from a simulated run."""
    sc = make(acceptance={"type": "iid", "alpha": alpha},
              workload__output_len={"type": "fixed", "value": 60})
    rows = simulate(sc, make_controller("ucb1", sc), seed=seed, trace=True).trace
    out = []
    for i, r in enumerate(rows, 1):
        row: dict[str, Any] = {**r, "step": i}
        for key in ("batch", "gamma", "drafted", "accepted"):
            row[key] = int(row[key])
        out.append(row)
    return out


def _header(run_id: str, started: float = 1764580000.5) -> dict[str, Any]:
    return {"run": run_id, "started": started, "pid": 4242, "vspec": "0.3.0",
            "settings": "9f8e7d6c"}


def _write(path: Path, objs: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs) + tail, encoding="utf-8")
    return path


@pytest.fixture
def appended(tmp_path: Path) -> tuple[Path, list[int]]:
    """legacy steps, run a1b2c3d4e5f6, run 0a0b0c0d0e0f with no steps, run ffee00112233,
    then a restart without header (step back to 1), then a line cut off by a crash."""
    legacy, first, third, unnamed = (_steps(1, 0.5), _steps(2, 0.9), _steps(3, 0.3),
                                     _steps(4, 0.7))
    objs = [*legacy, _header("a1b2c3d4e5f6"), *first, _header("0a0b0c0d0e0f", 1764590000.0),
            _header("ffee00112233"), *third, *unnamed]
    path = _write(tmp_path / "vspec_trace.jsonl", objs, tail='{"t": 99.5, "step": 12, "bat')
    return path, [len(legacy), len(first), 0, len(third), len(unnamed)]


def test_runs_split_at_headers_and_step_resets(
    appended: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, sizes = appended
    warnings: list[str] = []
    runs = read_trace_runs(path, warn=warnings.append)
    assert [len(r.records) for r in runs] == sizes
    assert [r.run_id for r in runs] == [None, "a1b2c3d4e5f6", "0a0b0c0d0e0f", "ffee00112233",
                                        None]
    assert [r.index for r in runs] == [1, 2, 3, 4, 5]
    assert runs[1].pid == 4242 and runs[1].vspec == "0.3.0" and runs[1].settings == "9f8e7d6c"
    assert runs[1].started == pytest.approx(1764580000.5)
    assert runs[0].records[0].step == 1 and runs[4].records[0].step == 1
    last_line = sum(sizes) + 3 + 1
    assert len(warnings) == 1 and f"{path}:{last_line}" in warnings[0]
    assert "cut-off last line" in warnings[0]
    assert select_trace_run(runs, "last", source=str(path)) is runs[4]
    assert select_trace_run(runs, "2", source=str(path)) is runs[1]
    assert select_trace_run(runs, 4, source=str(path)) is runs[3]
    assert select_trace_run(runs, "ffee00112233", source=str(path)) is runs[3]
    assert select_trace_run(runs, "a1b2", source=str(path)) is runs[1]  # unique prefix
    with pytest.raises(ScenarioError, match="holds 5 runs"):
        select_trace_run(runs, "6", source=str(path))
    with pytest.raises(ScenarioError, match="no steps"):
        select_trace_run(runs, "0a0b0c0d0e0f", source=str(path))
    with pytest.raises(ScenarioError, match="no run"):
        select_trace_run(runs, "beef", source=str(path))
    assert capsys.readouterr().err == ""  # warnings went to the callback only


def test_library_never_merges_runs(appended: tuple[Path, list[int]]) -> None:
    path, sizes = appended
    with pytest.raises(ScenarioError, match=r"holds 5 runs.*run="):
        load_trace(path, warn=lambda _m: None)
    assert len(load_trace(path, run="last", warn=lambda _m: None)) == sizes[-1]
    assert len(load_trace(path, run=2, warn=lambda _m: None)) == sizes[1]
    data = scenario_dict_from_trace(path, run="2", warn=lambda _m: None)
    assert "run 2" in data["description"] and "a1b2c3d4e5f6" in data["description"]
    assert f"{sizes[1]} steps" in data["description"]


def test_sim_cli_replays_one_run_and_says_which(
    appended: tuple[Path, list[int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, sizes = appended
    argv = ["--trace", str(path), "--policy", "fixed:1", "--seeds", "1", "--json",
            "--output-len", "32"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "holds 5 runs" in err and "replaying run 5" in err
    assert f"{path}:{sum(sizes) + 4}" in err and "warning" in err
    fitted = tmp_path / "fitted.json"
    assert main([*argv, "--trace-run", "a1b2c3d4e5f6", "--write-scenario", str(fitted)]) == 0
    err = capsys.readouterr().err
    assert "replaying run 2" in err and "a1b2c3d4e5f6" in err
    assert f"{sizes[1]} steps" in json.loads(fitted.read_text())["description"]
    assert main([*argv, "--trace-run", "9"]) == 2
    err = capsys.readouterr().err
    assert "holds 5 runs" in err and "--trace-run" in err


def test_single_run_trace_is_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "one.jsonl", [_header("abcdef012345"), *_steps(1, 0.6)])
    assert main(["--trace", str(path), "--policy", "fixed:1", "--seeds", "1", "--json",
                 "--output-len", "32"]) == 0
    assert capsys.readouterr().err == ""
    assert len(load_trace(path)) == len(_steps(1, 0.6))


def test_bad_json_mid_file_is_still_an_error(tmp_path: Path) -> None:
    steps = _steps(1, 0.6)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(steps[0]) + "\n{oops\n" + json.dumps(steps[1]) + "\n")
    with pytest.raises(ScenarioError, match=r"bad\.jsonl:2: not valid JSON"):
        read_trace_runs(path)
    only = _write(tmp_path / "only.jsonl", [], tail="{oops\n")
    with pytest.raises(ScenarioError, match=r"only\.jsonl:1: not valid JSON"):
        read_trace_runs(only)  # a lone bad line is not a cut-off tail of anything
    empty = _write(tmp_path / "hdr.jsonl", [_header("abcdef012345")])
    with pytest.raises(ScenarioError, match="no steps"):
        load_trace(empty)


@pytest.mark.parametrize("flag", ["--scenario", "--trace"])
def test_binary_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe binary")
    assert main([flag, str(blob), "--policy", "fixed:1", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(blob) in err and "not UTF-8" in err and "not JSON" in err
