"""Data parallel 2 with a dense model: a real `vllm serve --data-parallel-size 2` through the
launcher's cpu-tiny preset.

vLLM runs the data-parallel ranks of a non-MoE model as independent engines
(``reconfigure_for_independent_dp_rank``: each engine core sees data parallel size 1), so no
rank waits for another and each engine's controller may choose its own gamma. vSpec attaches
to both engines; greedy answers are target-only's whichever rank serves them. (MoE data
parallel keeps its ranks in lockstep; there adaptive gamma is refused, tests/host/abi/
test_runners.py.)
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402
from test_server_cpu_tiny import Server, launched  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

PROMPTS = es.PROMPTS[:4]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def dp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("dp-server")
    with launched(tmp, ["--", "--data-parallel-size", "2"]) as srv:
        yield srv


def complete(base: str, prompt: str) -> list[int]:
    body = json.dumps({"model": "vspec-tiny", "prompt": prompt, "max_tokens": MAX_TOKENS,
                       "temperature": 0, "ignore_eos": True,
                       "return_tokens_as_token_ids": True, "logprobs": 1}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=180) as resp:
        doc = json.load(resp)
    tokens = doc["choices"][0]["logprobs"]["tokens"]
    return [int(t.split(":", 1)[1]) for t in tokens]


def test_both_dense_data_parallel_engines_run_vspec_and_answer_as_the_target(
    dp_server: Server,
) -> None:
    prompts = PROMPTS * 3  # enough concurrent requests for both ranks
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        answers = list(pool.map(lambda p: complete(dp_server.base, p), prompts))
    log = Path(dp_server.log).read_text(errors="replace")
    hooks = [ln for ln in log.splitlines() if "vSpec: scheduler hook active" in ln]
    assert any("EngineCore_DP0" in ln for ln in hooks), log[-3000:]
    assert any("EngineCore_DP1" in ln for ln in hooks), log[-3000:]
    assert "data parallel size" not in log  # dense DP is not refused
    os.killpg(dp_server.proc.pid, signal.SIGINT)
    assert dp_server.proc.wait(timeout=60) is not None
    expected = es.reference_outputs(es.model("target"), PROMPTS, MAX_TOKENS)
    for i, got in enumerate(answers):
        assert got == expected[i % len(PROMPTS)], (i, got, expected[i % len(PROMPTS)])
