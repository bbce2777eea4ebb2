"""A real multi-process `vllm serve` started through the launcher's cpu-tiny preset.

Concurrent OpenAI chat requests are answered, `/metrics` exposes the vspec_ metrics next to
vLLM's own, the controller trace is written, and the server stops cleanly on SIGINT.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

PROMPTS = [
    "def parse_args(argv):",
    "import collections\n\nclass Cache:",
    "Write a function that sums a list.",
    "for line in open(path):",
]
START_TIMEOUT_S = 420


@dataclass
class Server:
    base: str
    proc: subprocess.Popen[bytes]
    trace: Path
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"server exited with {server.proc.returncode}:\n"
                        + server.log.read_text()[-4000:])
        try:
            with urllib.request.urlopen(f"{server.base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(2)
    pytest.fail("server not ready in time:\n" + server.log.read_text()[-4000:])


@contextmanager
def launched(tmp: Path, args: list[str], env_extra: dict[str, str] | None = None
             ) -> Iterator[Server]:
    """The launcher's cpu-tiny preset serving on a free port with ``args`` (launcher flags,
    then ``--`` and vLLM flags), until the block ends (SIGINT, then SIGKILL after 60 s)."""
    port = free_port()
    trace, log = tmp / "trace.jsonl", tmp / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update({"HUST_VSPEC_MODEL_DIR": str(es.models_dir()), **(env_extra or {})})
    cmd = [sys.executable, "-m", "vllm_hust_vspec.cli.launch", "--protocol", "cpu-tiny",
           "--port", str(port), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    srv = Server(f"http://127.0.0.1:{port}", proc, trace, log)
    try:
        wait_ready(srv)
        yield srv
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("server")
    (tmp / "prom").mkdir()
    with launched(tmp, ["--adaptive-trace", str(tmp / "trace.jsonl")],
                  {"PROMETHEUS_MULTIPROC_DIR": str(tmp / "prom")}) as srv:
        yield srv


def chat(base: str, prompt: str) -> dict[str, object]:
    body = json.dumps({"model": "vspec-tiny", "max_tokens": 40, "temperature": 0,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    req = urllib.request.Request(f"{base}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=180) as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def metric(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


def test_concurrent_chat_metrics_and_clean_stop(server: Server) -> None:
    prompts = PROMPTS * 2  # each prompt twice, concurrently
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda p: chat(server.base, p), prompts))
    texts = [a["choices"][0]["message"]["content"] for a in answers]  # type: ignore[index]
    completion = [a["usage"]["completion_tokens"] for a in answers]  # type: ignore[index]
    assert all(t for t in texts) and all(n > 0 for n in completion)
    # greedy decoding: the same prompt gets the same answer whatever it was batched with
    half = len(PROMPTS)
    assert texts[:half] == texts[half:]

    with urllib.request.urlopen(f"{server.base}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    steps = metric(text, "vspec_gamma_steps_total")
    committed = metric(text, "vspec_committed_tokens_total")
    assert steps > 0
    assert metric(text, "vspec_controller_fallbacks_total") == 0
    # every decode token is committed by a speculative step (the first token of each
    # request comes from its prefill)
    assert committed >= sum(completion) - len(prompts)
    assert "vllm:spec_decode_num_drafts_total" in text  # vLLM's own metrics beside vSpec's
    drafts = metric(text, "vllm:spec_decode_num_drafts_total")
    assert "vspec_arm_reward_tokens_per_second" in text

    os.killpg(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(timeout=60) is not None
    lines = [json.loads(x) for x in server.trace.read_text().splitlines() if x.strip()]
    headers = [r for r in lines if "run" in r]
    records = [r for r in lines if "step" in r]
    assert len(headers) == 1 and lines[0] is headers[0]  # one run, its header first
    # the EngineCore process (plugins load inside EngineCore.__init__ there) calibrated
    # before it served: its steps counted nowhere, its prior named in the header
    assert headers[0]["prior"] == "start-up calibration", headers[0]
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    log = server.log.read_text()
    assert "start-up calibration:" in log and "no start-up calibration" not in log
    assert len(records) == steps  # flushed on shutdown: one line per step
    assert {r["gamma"] for r in records} <= set(range(0, 5))
    # vLLM's draft counter agrees with the trace on whether any step verified drafts (where
    # speculation does not pay, a calibrated controller may pin gamma 0 from its first step)
    assert (drafts > 0) == (sum(r["drafted"] for r in records) > 0)
