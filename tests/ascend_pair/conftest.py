"""Fixtures for the vllm-ascend 0.23 + vLLM 0.23 pair (built by scripts/setup_ascend_pair.sh).

The pair lives in its own interpreter (.cache/ascend023/venv), so every check runs in a
subprocess of that interpreter (``_pair_checks.py``); this process only reads its JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / ".cache" / "ascend023"
PAIR_PY = PAIR / "venv" / "bin" / "python"
STAMP = PAIR / "venv" / ".ascend023-stamp"
CHECKS = Path(__file__).resolve().parent / "_pair_checks.py"
SETUP_CMD = "bash scripts/setup_ascend_pair.sh"


def _models_dir() -> str | None:
    """The tiny test models (built on first use like the e2e tests); None if unavailable."""
    if os.environ.get("VSPEC_TEST_MODELS"):
        return os.environ["VSPEC_TEST_MODELS"]
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import fixtures_models

        return str(fixtures_models.models_dir())
    except BaseException:  # noqa: BLE001 - pytest.skip inside models_dir() included
        return None
    finally:
        sys.path.remove(str(ROOT / "tests"))


@pytest.fixture(scope="session")
def pair_python() -> Path:
    if not (PAIR_PY.exists() and STAMP.exists()):
        pytest.skip(f"vllm-ascend 0.23 / vLLM 0.23 pair not built under {PAIR}: run `{SETUP_CMD}`")
    return PAIR_PY


def _run_checks(pair_python: Path, what: str) -> dict[str, Any]:
    env = {**os.environ, "VLLM_CACHE_ROOT": str(PAIR / "vllm-cache"),
           "VSPEC_FAKE_NPU": str(ROOT / "tests"), "VLLM_DISABLE_COMPILE_CACHE": "1"}
    models = _models_dir()
    if models:
        env["VSPEC_TEST_MODELS"] = models
    proc = subprocess.run(["nice", "-n", "10", str(pair_python), str(CHECKS), what],
                          capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PAIR_JSON ")), None)
    assert line, f"pair checks produced no result (rc={proc.returncode}):\n{proc.stderr[-4000:]}"
    found = json.loads(line[len("PAIR_JSON "):])
    assert "error" not in found, f"pair checks failed:\n{found['error']}\n{proc.stderr[-3000:]}"
    return found


@pytest.fixture(scope="session")
def pair_findings(pair_python: Path) -> dict[str, Any]:
    """imports + graph + runner findings from one subprocess run (~30 s on 2 cores)."""
    return _run_checks(pair_python, "all")


VSPEC_MODES = {"FULL_DECODE_ONLY": "vspec", "FULL_AND_PIECEWISE": "vspec-full-and-piecewise",
               "FULL": "vspec-full"}


@pytest.fixture(scope="session", params=list(VSPEC_MODES))
def pair_vspec(request: pytest.FixtureRequest, pair_python: Path) -> dict[str, Any]:
    """vSpec's graph-per-gamma patches on the real runner, one subprocess per graph mode
    (~20 s each; FULL is combined FULL)."""
    what = VSPEC_MODES[request.param]
    found = _run_checks(pair_python, what)["vspec"]
    if "skipped" in found:
        pytest.skip(found["skipped"])
    return found
