"""fit-profile reads what the profiler writes, writes files others can read, and rejects
binary input cleanly; the shared atomic writer's permissions (no vLLM)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive import FitError, StepFeedback, load_profile, parse_samples
from vllm_hust_vspec.adaptive._files import write_text_atomic
from vllm_hust_vspec.cli.fit_profile import main as fit_main
from vllm_hust_vspec.profiling import CellRun, ProfileGrid, collect, plan_profile
from vllm_hust_vspec.settings import resolve_settings


@pytest.fixture
def umask_027() -> Iterator[int]:
    """A umask other than the usual 022, so a hard-coded 0644 cannot pass for 'the umask'."""
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _runs(grid: ProfileGrid) -> list[CellRun]:
    """Steps timed by a known latency model, slower on every other repeat (so the median
    repeat is the one fitted and some samples are marked unselected)."""
    runs = []
    for cell in grid.cells():
        slow = 1.0 + 0.05 * (cell.repeat % 2)
        steps = []
        for i in range(cell.output_len // (1 + cell.gamma)):
            t = (0.005 + 0.0002 * cell.batch * (1 + cell.gamma) + 0.001 * cell.gamma) * slow
            t *= 1.0 + 0.01 * ((i * 7919) % 13 - 6) / 6  # deterministic jitter
            acc = min(cell.gamma, 1)
            steps.append(StepFeedback(batch_size=cell.batch, gamma=cell.gamma,
                                      drafted=(cell.gamma,) * cell.batch,
                                      accepted=(acc,) * cell.batch,
                                      committed=cell.batch * (1 + acc), interval_s=t,
                                      token_budget=4096, steady=True))
        runs.append(CellRun(cell, steps))
    return runs


def _profile_into(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The profiler's own output folder (collect() with synthetic measurements)."""
    models = tmp_path / "models"
    for name in ("target", "draft"):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(f'{{"name": "{name}"}}')
    env = {"HUST_VSPEC_MODEL_DIR": str(models)}
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(models))
    grid = ProfileGrid(batch_sizes=(1, 4), gammas=(0, 1, 2), output_lens=(24, 36))
    plan = plan_profile(resolve_settings(preset="cpu-tiny", env=env), env, grid,
                        out_dir=tmp_path / "out")
    collect(plan, runs=_runs(grid))
    return tmp_path / "out"


@pytest.fixture
def profiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return _profile_into(tmp_path, monkeypatch)


def test_fit_profile_reads_the_profilers_measurements(
    profiled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measurements = profiled / "measurements.json"
    meas = json.loads(measurements.read_text())
    assert {"committed", "output_len", "repeat", "selected"} <= set(meas["samples"][0])
    out = tmp_path / "refit.json"
    assert fit_main([str(measurements), str(out)]) == 0, \
        capsys.readouterr().err
    refit, measured = load_profile(out), load_profile(profiled / "profile.json")
    # only the median repeats are fitted, as the profiler did
    assert refit.fit is not None and refit.fit.num_samples == meas["fit"]["num_samples"]
    assert refit.target.constant_s == pytest.approx(measured.target.constant_s, rel=1e-6)
    assert refit.draft.constant_s == pytest.approx(measured.draft.constant_s, rel=1e-6)
    # the bare samples list (e.g. extracted with jq '.samples') is accepted as well
    bare = tmp_path / "samples.json"
    bare.write_text(json.dumps(meas["samples"]))
    assert fit_main([str(bare), str(tmp_path / "bare.json")]) == 0
    assert load_profile(tmp_path / "bare.json").fit.num_samples == refit.fit.num_samples


def test_unknown_keys_are_still_rejected() -> None:
    good = {"batch_size": 1, "gamma": 0, "step_s": 0.01, "committed": 1, "output_len": 8,
            "repeat": 0, "selected": True}
    assert len(parse_samples([good])) == 1
    with pytest.raises(FitError, match=r"samples\[0\]\.commited"):
        parse_samples([{**good, "commited": 1}])
    with pytest.raises(FitError, match=r"samples\[0\]\.selected"):
        parse_samples([{**good, "selected": "yes"}])
    with pytest.raises(FitError, match="unknown top-level key 'sampels'"):
        parse_samples({"samples": [good], "sampels": []})
    with pytest.raises(FitError, match="schema_version"):
        parse_samples({"schema_version": 99, "samples": [good]})
    # unselected repeats are skipped
    assert len(parse_samples([good, {**good, "selected": False}])) == 1


def test_fit_profile_output_gets_umask_permissions(
    profiled: Path, tmp_path: Path, umask_027: int
) -> None:
    out = tmp_path / "p.json"
    assert fit_main([str(profiled / "measurements.json"), str(out),
                     "--no-context-terms"]) == 0
    assert _mode(out) == 0o666 & ~umask_027
    out.chmod(0o600)
    assert fit_main([str(profiled / "measurements.json"), str(out),
                     "--no-context-terms"]) == 0
    assert _mode(out) == 0o666 & ~umask_027  # a new file replaces it, as documented


def test_profiler_outputs_get_umask_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_027: int
) -> None:
    folder = _profile_into(tmp_path, monkeypatch)
    for name in ("profile.json", "measurements.json"):
        assert _mode(folder / name) == 0o666 & ~umask_027, name


def test_write_text_atomic_replaces_and_cleans_up(tmp_path: Path, umask_027: int) -> None:
    target = tmp_path / "sub" / "x.json"
    write_text_atomic(target, "one\n", make_parents=True)
    write_text_atomic(target, "two\n")
    assert target.read_text() == "two\n" and _mode(target) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["x.json"]
    with pytest.raises(OSError):
        write_text_atomic(tmp_path / "missing" / "y.json", "z")


@pytest.mark.parametrize("payload", [b"\x89PNG\r\n\x1a\n\x00\x00", b"[{\"a\": \"\xff\xfe\"}]"])
def test_fit_profile_binary_samples_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: bytes
) -> None:
    samples = tmp_path / "samples.bin"
    samples.write_bytes(payload)
    assert fit_main([str(samples), str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(samples) in err and "not UTF-8" in err and "not JSON" in err
    assert not (tmp_path / "p.json").exists()
