"""vllm-hust-vspec-bench: numeric options are range-checked by argparse, and the cpu-tiny
pair (and the profiler) find a checkout's bundled tiny models without HUST_VSPEC_MODEL_DIR,
as run.sh does (dry runs only: no server, no vLLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_hust_vspec.cli import bench as bench_cli
from vllm_hust_vspec.launch import models as launch_models

RUN = ["run", "--base-url", "http://127.0.0.1:9", "--backend", "builtin", "--dry-run"]
PAIR = ["pair", "--protocol", "cpu-tiny", "--backend", "builtin", "--dry-run", "--json"]


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No model source configured: no model dir, an empty Hugging Face cache."""
    for key in ("HUST_VSPEC_MODEL_DIR", "HUST_VSPEC_MODEL_REGISTRY", "HUST_VSPEC_ENABLED",
                "VSPEC_CONFIG", "VLLM_PLUGINS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def _checkout(root: Path, *, models: bool = True) -> Path:
    """A source checkout as run.sh sees it: run.sh beside .cache/models/<name>."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.sh").write_text("#!/bin/sh\n")
    if models:
        for name in ("target", "draft"):
            (root / ".cache" / "models" / name).mkdir(parents=True)
            (root / ".cache" / "models" / name / "config.json").write_text("{}")
    return root


@pytest.mark.parametrize(("argv", "flag", "value"), [
    (PAIR, "--min-speedup", "-1"),
    (PAIR, "--min-speedup", "0"),
    (PAIR, "--min-speedup", "nan"),
    (PAIR, "--min-speedup", "inf"),
    (PAIR, "--repetitions", "0"),
    (PAIR, "--repetitions", "1.5"),
    (PAIR, "--server-timeout", "-5"),
    (PAIR, "--server-timeout", "nan"),
    (RUN, "--num-prompts", "-3"),
    (RUN, "--output-len", "0"),
    (RUN, "--random-input-len", "-1"),
    (RUN, "--max-concurrency", "0"),
    (RUN, "--warmup-prompts", "-1"),
    (RUN, "--warmup-output-len", "0"),
    (RUN, "--temperature", "-0.5"),
    (RUN, "--temperature", "nan"),
    (RUN, "--request-rate", "nan"),
    (RUN, "--request-rate", "-2"),
])
def test_bad_numbers_are_argparse_errors(
    argv: list[str], flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_cli.main([*argv, f"{flag}={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and repr(value) in err


def test_good_numbers_pass(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(launch_models, "CHECKOUT_ROOT", _checkout(clean_env / "src"))
    assert bench_cli.main([*RUN, "--request-rate", "unlimited", "--warmup-prompts", "0",
                           "--temperature", "0", "--max-concurrency", "4"]) == 0
    capsys.readouterr()
    assert bench_cli.main([*PAIR, "--min-speedup", "0.95", "--repetitions", "1",
                           "--server-timeout", "30", "--request-rate", "2.5"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["min_speedup"] == 0.95 and plan["order"] == ["baseline-r1", "vspec-r1"]


def test_cpu_tiny_pair_finds_the_checkouts_tiny_models(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _checkout(clean_env / "checkout")
    monkeypatch.setattr(launch_models, "CHECKOUT_ROOT", root)
    assert bench_cli.main(PAIR) == 0
    captured = capsys.readouterr()
    plan = json.loads(captured.out)
    models = (root / ".cache" / "models").resolve()
    assert str(models / "target") in plan["commands"]["baseline"]["argv"]
    assert str(models / "draft") in " ".join(plan["commands"]["vspec"]["argv"])
    assert "HUST_VSPEC_MODEL_DIR" in captured.err and str(models) in captured.err


def test_an_explicit_model_dir_wins(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(launch_models, "CHECKOUT_ROOT", _checkout(clean_env / "checkout"))
    mine = _checkout(clean_env / "mine") / ".cache" / "models"
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(mine))
    assert bench_cli.main(PAIR) == 0
    captured = capsys.readouterr()
    assert str(mine.resolve() / "target") in json.loads(captured.out)["commands"]["vspec"]["argv"]
    assert "HUST_VSPEC_MODEL_DIR" not in captured.err


def test_without_a_checkout_the_error_names_the_variable(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # an installed wheel: no run.sh beside the package, so no tiny models to fall back on
    monkeypatch.setattr(launch_models, "CHECKOUT_ROOT", _checkout(clean_env / "w", models=False))
    assert bench_cli.main(PAIR) == 2
    assert "HUST_VSPEC_MODEL_DIR" in capsys.readouterr().err
    assert launch_models.checkout_model_dir(clean_env / "nowhere") is None


def test_profile_dry_run_finds_them_too(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm_hust_vspec.cli import profile as profile_cli

    root = _checkout(clean_env / "checkout")
    monkeypatch.setattr(launch_models, "CHECKOUT_ROOT", root)
    assert profile_cli.main(["--protocol", "cpu-tiny", "--gammas", "0,1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert str((root / ".cache" / "models" / "target").resolve()) in out
