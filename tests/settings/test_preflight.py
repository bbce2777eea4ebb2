"""Bad files and numbers fail before any model loads, naming the flag, key or variable used.

The launcher checks them before it execs vLLM (exit 2), and the plugin checks them when it
registers, which vLLM does before loading a model (env-only enabling, exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_hust_vspec.cli.launch import main
from vllm_hust_vspec.settings import SettingsError, preflight, resolve_settings

REPO = Path(__file__).resolve().parents[2]
GOOD_PROFILE = REPO / "profiles" / "cpu-tiny-draft-float32.json"


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "models"
    for name in ("target", "draft"):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    for key in list(os.environ):
        if key.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    return root


def launch_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the launcher's dry run; assert it fails with exit 2 and return stderr (a bad flag
    value stops in argparse, a bad file in the preflight: both exit 2)."""
    try:
        code = main(["--protocol", "cpu-tiny", "--dry-run", *args])
    except SystemExit as stop:
        code = stop.code  # type: ignore[assignment]
    assert code == 2
    return capsys.readouterr().err


def bad_profiles(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    wrong_schema = json.loads(GOOD_PROFILE.read_text())
    wrong_schema["schema_version"] = 99
    paths = {
        "missing": (tmp_path / "nope.json", "cannot read profile"),
        "not json": (tmp_path / "bad.json", "not valid JSON"),
        "wrong schema": (tmp_path / "v99.json", "unsupported version"),
    }
    paths["not json"][0].write_text("{not json")
    paths["wrong schema"][0].write_text(json.dumps(wrong_schema))
    return paths


def test_bad_profile_fails_the_launch_naming_the_flag(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, reason in bad_profiles(tmp_path).values():
        err = launch_error(capsys, "--adaptive-policy", "profile", "--adaptive-profile", str(path))
        assert "flag --adaptive-profile" in err and reason in err and str(path) in err
    assert main(["--protocol", "cpu-tiny", "--dry-run", "--adaptive-policy", "profile",
                 "--adaptive-profile", str(GOOD_PROFILE)]) == 0


def test_bad_profile_in_a_config_file_names_file_and_key(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text(f'[serve]\nadaptive_policy = "profile"\nadaptive_profile = "{tmp_path}/x"\n')
    err = launch_error(capsys, "--config", str(cfg))
    assert f"{cfg}: [serve] adaptive_profile" in err


def test_trace_path_that_cannot_be_written(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = launch_error(capsys, "--adaptive-trace", str(tmp_path))
    assert "flag --adaptive-trace" in err and "is a folder" in err
    locked = tmp_path / "ro"
    locked.mkdir()
    real_access = os.access
    # Permission bits do not bind root (CI), so the folder's answer is emulated.
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    err = launch_error(capsys, "--adaptive-trace", str(locked / "sub" / "t.jsonl"))
    assert "not writable" in err and str(locked) in err


def test_trace_path_in_a_new_folder_is_fine(models: Path, tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "trace.jsonl"
    assert main(["--protocol", "cpu-tiny", "--dry-run", "--adaptive-trace", str(target)]) == 0
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_trace_path_that_looks_writable_but_cannot_be_created(
    models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """/proc looks writable to root; trying to make the folder, as the writer will, says
    otherwise, before any model loads."""
    err = launch_error(capsys, "--adaptive-trace", "/proc/nonexistent/t.jsonl")
    assert "flag --adaptive-trace: cannot create '/proc/nonexistent/t.jsonl'" in err
    assert "'/proc/nonexistent'" in err  # the folder that could not be made
    err = launch_error(capsys, "--adaptive-trace", "/proc/t.jsonl")
    assert "cannot create '/proc/t.jsonl'" in err and "vspec-probe" not in err
    resolved = resolve_settings(env={"HUST_VSPEC_ADAPTIVE_TRACE": "/proc/x/t.jsonl"})
    with pytest.raises(SettingsError, match="environment HUST_VSPEC_ADAPTIVE_TRACE"):
        preflight(resolved.settings, resolved.origins)


def test_the_creation_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    existing = tmp_path / "old.jsonl"
    existing.write_text('{"step":1}\n')
    (tmp_path / "half").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for target in (existing, tmp_path / "half" / "a" / "b" / "t.jsonl", tmp_path / "t.jsonl"):
        resolved = resolve_settings(cli={"adaptive_trace": str(target)}, env={})
        preflight(resolved.settings, resolved.origins)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert existing.read_text() == '{"step":1}\n'  # opened for appending, not written


def test_trace_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    resolved = resolve_settings(cli={"adaptive_trace": str(blocker / "t.jsonl")}, env={})
    with pytest.raises(SettingsError, match="not a folder"):
        preflight(resolved.settings, resolved.origins)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(
    value: str, models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = launch_error(capsys, f"--adaptive-online-exploration={value}")
    assert "finite" in err and "--adaptive-online-exploration" in err
    with pytest.raises(SettingsError, match="HUST_VSPEC_ADAPTIVE_HYSTERESIS.*finite"):
        resolve_settings(env={"HUST_VSPEC_ADAPTIVE_HYSTERESIS": value})


def test_model_folder_without_config_is_refused(
    models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (models / "draft" / "config.json").unlink()
    err = launch_error(capsys)
    assert "no config.json" in err and "draft" in err


def test_missing_vocab_file_is_refused(tmp_path: Path) -> None:
    resolved = resolve_settings(
        cli={"method": "eagle", "eagle_draft_active_vocab_file": str(tmp_path / "ids.json")},
        env={},
    )
    with pytest.raises(SettingsError, match="flag --eagle-draft-active-vocab-file"):
        preflight(resolved.settings, resolved.origins)


def test_env_only_enabling_fails_at_register_before_loading(tmp_path: Path) -> None:
    """The plugin's own check, as vLLM's front end runs it: exit 2, the variable named, fast."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update({
        "HUST_VSPEC_ENABLED": "1",
        "HUST_VSPEC_ADAPTIVE_POLICY": "profile",
        "HUST_VSPEC_ADAPTIVE_PROFILE": str(tmp_path / "missing.json"),
    })
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm_hust_vspec; vllm_hust_vspec.register()"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    took = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    assert "environment HUST_VSPEC_ADAPTIVE_PROFILE" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 60  # no model load, whatever the import cost of the host
